"""The start ledger and must-hit on real engine starts (tests/real/ledger/engine_start.py, each a process of
its own), with the real parts this host has: torch.compile on CPU (Inductor builds C++ and a later process
finds it in its FX graph cache), real Triton 3.6 compiling a kernel for sm_90, a real warm snapshot saved to
and restored from a ``file://`` store, each new host under another cache root than the first, and
`jitguard starts` judging the last start."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from envelope_schemas import schema_errors
from start_file_schema import file_schema_errors
from triton_release import real_triton

pytestmark = pytest.mark.slow
START = Path(__file__).with_name("engine_start.py")
pytest.importorskip("torch")


def _host(tmp: Path, name: str, store: Path, **extra: str) -> dict[str, str]:
    """A host: its own jitguard cache and Inductor and Triton caches, under its own root."""
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("JITGUARD_", "TORCHINDUCTOR_", "TRITON_"))
    }
    root = tmp / name
    env.update(
        JITGUARD_CACHE_DIR=str(root / "jitguard"),
        TORCHINDUCTOR_CACHE_DIR=str(root / "inductor"),
        TRITON_CACHE_DIR=str(root / "triton"),
        JITGUARD_WARM_ARCH="9.0",
        **extra,
    )
    if name != "first":
        env["JITGUARD_SHARE"] = f"file://{store}"
    return env


def _start(env: dict[str, str], workload: str) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [sys.executable, str(START), workload], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done


def _jitguard(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "jitguard", *args], env=env, capture_output=True, text=True, timeout=120
    )


def _starts(env: dict[str, str], *args: str) -> tuple[int, dict]:
    done = _jitguard(env, "starts", "--json", *args)
    payload = json.loads(done.stdout)
    assert schema_errors(payload) == [], schema_errors(payload)
    return done.returncode, payload


def _save(env: dict[str, str], store: Path, layer: str) -> None:
    done = _jitguard(env, "warm", "save", "--store", f"file://{store}", "--arch", "9.0", "--layers", layer)
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.fixture(scope="module")
def inductor_hosts(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The first host: one cold start compiling the function, its Inductor cache saved as the snapshot."""
    tmp = tmp_path_factory.mktemp("inductor")
    first = _host(tmp, "first", tmp / "store")
    _start(first, "inductor:2")
    _save(first, tmp / "store", "inductor")
    return tmp


def test_a_cold_start_records_what_inductor_compiled(inductor_hosts: Path) -> None:
    env = _host(inductor_hosts, "first", inductor_hosts / "store")
    code, payload = _starts(env)
    assert code == 0
    (start,) = payload["starts"]
    assert start["layers"]["inductor"]["compiled"] >= 1 and start["warm"]["outcome"] == "skipped"
    (process,) = start["processes"]
    assert process["role"] == "engine-core" and process["ready_after_s"] is not None
    (record_file,) = (Path(env["JITGUARD_CACHE_DIR"]) / "starts" / start["start_id"]).iterdir()
    record = json.loads(record_file.read_text())
    assert file_schema_errors(record) == []
    # Without a snapshot there is nothing to hold the start to: --check says so and fails.
    code, payload = _starts(env, "--check")
    assert code == 1 and "not covered by a warm snapshot" in payload["check"]["reason"]


def test_a_new_host_restored_from_the_store_hits_and_passes_must_hit(inductor_hosts: Path) -> None:
    env = _host(inductor_hosts, "second", inductor_hosts / "store", JITGUARD_WARM="require")
    done = _start(env, "inductor:2")
    assert "must-hit miss:" not in done.stderr
    assert "jitguard: start ledger: inductor 1 cached" in done.stderr
    code, payload = _starts(env, "--check")
    assert code == 0 and payload["check"]["passed"] is True
    start = payload["starts"][0]
    assert start["warm"]["outcome"] == "restored" and "inductor" in start["warm"]["covered"]
    assert start["layers"]["inductor"]["compiled"] == 0 and start["phases"]["restore"] > 0
    text = _jitguard(env, "starts", "--check")
    assert text.returncode == 0 and "must-hit: passed" in text.stdout


def test_a_changed_key_after_the_restore_is_a_must_hit_miss_with_its_cause(inductor_hosts: Path) -> None:
    env = _host(inductor_hosts, "third", inductor_hosts / "store", JITGUARD_WARM="require")
    done = _start(env, "inductor:3")  # another function: another FX graph key than the snapshot holds
    assert "ERROR jitguard.ledger: jitguard: must-hit miss: Inductor FX graphs compiled" in done.stderr
    assert "held no graph for their keys" in done.stderr
    code, payload = _starts(env, "--check")
    assert code == 1 and payload["exit_code"] == 1
    check = payload["check"]
    assert check["passed"] is False and check["covered_compiles"] == {"inductor": 1}
    assert check["misses"][0]["layer"] == "inductor" and check["misses"][0]["cause"]
    text = _jitguard(env, "starts", "--check")
    assert text.returncode == 1 and "must-hit: FAILED" in text.stdout and "inductor:" in text.stdout


def test_triton_kernels_are_counted_and_a_relocated_restore_hits(tmp_path: Path) -> None:
    triton = real_triton()
    store = tmp_path / "store"
    path = {"PYTHONPATH": os.pathsep.join([str(triton), os.environ.get("PYTHONPATH", "")])}
    first = _host(tmp_path, "first", store, **path)
    _start(first, "triton")
    _, payload = _starts(first)
    assert payload["starts"][0]["layers"]["triton"]["compiled"] == 1
    assert payload["starts"][0]["layers"]["triton"]["examples"] == ["add"]
    _start(first, "triton")  # the same host again: Triton's own cache
    _, payload = _starts(first)
    again = payload["starts"][0]["layers"]["triton"]
    assert (again["compiled"], again["cached"]) == (0, 1)
    _save(first, store, "triton")
    second = _host(tmp_path, "second", store, JITGUARD_WARM="require", **path)  # another TRITON_CACHE_DIR
    done = _start(second, "triton")
    assert "must-hit miss:" not in done.stderr
    code, payload = _starts(second, "--check")
    assert code == 0, payload["check"]
    assert payload["starts"][0]["layers"]["triton"]["cached"] == 1


def test_a_triton_kernel_built_for_another_constexpr_is_a_miss_that_says_so(tmp_path: Path) -> None:
    """vLLM's mamba conv1d kernels take the number of cache lines as a tl.constexpr: a host whose cache size
    differs compiles them again. The miss says the cache holds another build of that kernel."""
    triton = real_triton()
    store = tmp_path / "store"
    path = {"PYTHONPATH": os.pathsep.join([str(triton), os.environ.get("PYTHONPATH", "")])}
    first = _host(tmp_path, "first", store, **path)
    _start(first, "triton:128")
    _save(first, store, "triton")
    second = _host(tmp_path, "second", store, JITGUARD_WARM="require", **path)
    done = _start(second, "triton:256")  # the same kernel, another BLOCK: another key
    assert "must-hit miss: Triton kernels compiled add" in done.stderr
    code, payload = _starts(second, "--check")
    assert code == 1
    (miss,) = payload["check"]["misses"]
    assert "but 1 other build of add" in miss["cause"] and "tl.constexpr" in miss["cause"]


def test_a_snapshot_baked_in_by_command_covers_a_start_without_a_store(inductor_hosts: Path) -> None:
    """The Docker image case: `jitguard warm restore` in a build step, the engine started later with no store."""
    env = _host(inductor_hosts, "image", inductor_hosts / "store", JITGUARD_WARM="require")
    baked = _jitguard(env, "warm", "restore", "--arch", "9.0")
    assert baked.returncode == 0, baked.stdout + baked.stderr
    del env["JITGUARD_SHARE"], env["JITGUARD_WARM_ARCH"]  # serving: no store, no arch named
    done = _start(env, "inductor:2")
    assert "no warm snapshot covers this start" not in done.stderr
    code, payload = _starts(env, "--check")
    assert code == 0, payload["check"]
    assert payload["starts"][0]["warm"]["outcome"] == "present"
    assert "inductor" in payload["starts"][0]["warm"]["covered"]


def test_a_triton_listener_set_before_jitguard_is_still_called(tmp_path: Path) -> None:
    path = {"PYTHONPATH": os.pathsep.join([str(real_triton()), os.environ.get("PYTHONPATH", "")])}
    env = _host(tmp_path, "first", tmp_path / "store", **path)
    done = _start(env, "triton-chained")
    assert "EARLIER LISTENER CALLED [False]" in done.stdout
    _, payload = _starts(env)
    assert payload["starts"][0]["layers"]["triton"]["compiled"] == 1
    (record_file,) = (Path(env["JITGUARD_CACHE_DIR"]) / "starts" / payload["starts"][0]["start_id"]).iterdir()
    notes = json.loads(record_file.read_text())["notes"]
    assert notes == [
        "Triton: kernels counted through knobs.compilation.listener, autotune runs through Autotuner.check_disk_cache"
    ]
