"""Warm restores as real processes meet them: two restorers on one host at once, a cache dir that is
read-only, a store that holds nothing yet, and the command's JSON against its schema."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from envelope_schemas import assert_valid
from fault_makers import assert_no_traceback, host_env, jitguard, on_tmpfs

pytest.importorskip(
    "fsspec", reason="the artifact store needs fsspec (pip install fsspec: the 'share' extra)"
)

ARCH = "9.0"


def first_host(tmp_path: Path, cache_dir: Path) -> tuple[Path, dict[str, str]]:
    """A host whose engine start filled its caches, saved to the store by command."""
    store, root = tmp_path / "store", tmp_path / "host-a"
    store.mkdir()
    for relative in (
        "vllm/torch_compile_cache/h/rank_0_0/a.py",
        "triton/K/k.cubin",
        "inductor/fxgraph/x/entry",
    ):
        (root / relative).parent.mkdir(parents=True, exist_ok=True)
        (root / relative).write_bytes(relative.encode() * 100)
    saved = jitguard(["warm", "save", "--arch", ARCH, "--json"], host_env(root, store))
    assert saved.returncode == 0, saved.stderr
    envelope = json.loads(saved.stdout)
    assert_valid(envelope)
    assert envelope["outcome"] == "saved" and envelope["saved"]["files"] == 3
    return store, host_env(root, store)


def test_a_new_host_restores_by_command_and_the_json_fits_its_schema(tmp_path: Path, cache_dir: Path) -> None:
    store, _env = first_host(tmp_path, cache_dir)
    new = tmp_path / "host-b"
    proc = jitguard(["warm", "restore", "--arch", ARCH, "--json"], host_env(new, store))
    assert_no_traceback(proc)
    assert proc.returncode == 0, proc.stderr
    envelope = json.loads(proc.stdout)
    assert_valid(envelope)
    assert envelope["outcome"] == "restored" and envelope["restored"]["landed"] == 3
    assert (new / "triton" / "K" / "k.cubin").read_bytes() == b"triton/K/k.cubin" * 100
    show = jitguard(["warm", "show", "--arch", ARCH, "--json"], host_env(new, store))
    assert show.returncode == 0 and json.loads(show.stdout)["snapshot"]["files"] == 3
    assert_valid(json.loads(show.stdout))


def test_a_store_with_no_snapshot_for_this_stack_is_a_miss_exit_1(tmp_path: Path, cache_dir: Path) -> None:
    (tmp_path / "empty-store").mkdir()
    proc = jitguard(["warm", "restore", "--arch", ARCH], host_env(tmp_path / "h", tmp_path / "empty-store"))
    assert_no_traceback(proc)
    assert proc.returncode == 1 and "restore: miss" in proc.stdout


def test_no_store_and_a_bad_arch_are_usage_errors(tmp_path: Path, cache_dir: Path) -> None:
    env = host_env(tmp_path / "h", tmp_path / "s")
    env.pop("JITGUARD_SHARE")
    for args, message in (
        (["warm", "restore", "--arch", ARCH], "no artifact store"),
        (["warm", "save", "--arch", "ninety", "--store", "file:///x"], "not a compute capability"),
        (
            ["warm", "save", "--arch", ARCH, "--store", "file:///x", "--layers", "triton,pip"],
            "known layers are",
        ),
    ):
        proc = jitguard(args, env)
        assert_no_traceback(proc)
        assert proc.returncode == 2 and message in proc.stderr, proc.stderr


def test_two_restorers_at_once_restore_once_and_the_second_waits_visibly(
    tmp_path: Path, cache_dir: Path
) -> None:
    store, _env = first_host(tmp_path, cache_dir)
    # Hold the first restorer once it holds the lock: stopped (SIGSTOP) while the second comes and waits.
    new = tmp_path / "host-b"
    env = host_env(new, store)
    args = [sys.executable, "-m", "jitguard", "warm", "restore", "--arch", ARCH, "--json"]
    first = subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    sidecars = new / "jitguard" / "locks"
    deadline = time.monotonic() + 60
    while not any(
        p.name.endswith(".jitguard.json") for p in (sidecars.iterdir() if sidecars.is_dir() else [])
    ):
        assert first.poll() is None and time.monotonic() < deadline, first.communicate()
        time.sleep(0.01)
    os.kill(first.pid, signal.SIGSTOP)
    second = subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(3)  # the waiter reports every 2 s
    os.kill(first.pid, signal.SIGCONT)
    out1, err1 = first.communicate(timeout=120)
    assert first.returncode == 0 and json.loads(out1)["outcome"] == "restored", out1 + err1
    try:
        out2, err2 = second.communicate(timeout=120)
    finally:
        second.kill()

    assert first.returncode == 0 and second.returncode == 0, err1 + err2
    assert json.loads(out1)["outcome"] == "restored"
    assert json.loads(out2)["outcome"] == "present"
    assert f"waiting for the restore of warm snapshot 'default' (sm_90): lock held by pid {first.pid}" in err2


def test_a_read_only_cache_dir_is_left_alone_and_the_other_caches_are_restored(
    tmp_path: Path, cache_dir: Path
) -> None:
    store, _env = first_host(tmp_path, cache_dir)
    new = tmp_path / "host-b"
    triton = new / "triton"
    proc = on_tmpfs(
        triton,
        [sys.executable, "-m", "jitguard", "warm", "restore", "--arch", ARCH, "--json"],
        host_env(new, store),
        prepare=f"mount -o remount,ro {triton}",
    )
    assert_no_traceback(proc)
    assert proc.returncode == 1, proc.stderr  # a restore that could not write everything says so
    envelope = json.loads(proc.stdout)
    restored = envelope["restored"]
    assert envelope["outcome"] == "partial" and restored["complete"] is False
    assert restored["landed"] == 2
    assert restored["refused"] == {"cannot write (Read-only file system)": 1}
    assert (new / "vllm" / "torch_compile_cache" / "h" / "rank_0_0" / "a.py").is_file()
    assert not list(
        (new / "jitguard" / "warm").glob("restored-*.json")
    )  # no marker: the next start tries again
