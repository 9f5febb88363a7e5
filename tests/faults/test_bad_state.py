"""Bad state: every fault of jitguard's own files degrades to a clear message or the documented fallback,
never a traceback, and a stuck cache can always be cleared with jitguard itself."""

from __future__ import annotations

import json
import math
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import pytest

from fault_makers import (
    assert_no_traceback,
    base_env,
    fill_disk,
    jitguard,
    on_tmpfs,
    python,
    tiny_project,
)
from jitguard.findings.model import Finding
from jitguard.state.failure_cache import FailureCache
from jitguard.state.job_memory import JobMemoryStore

LIBCUDA = Finding("link-missing-libcuda", "error", "no libcuda", "links -lcuda", ("cannot find -lcuda",))
DEEP = "[" * 1000 + "]" * 1000


def _fallback_dir() -> Path:
    """Where doctor says logs and slots go when the cache dir cannot take them."""
    return Path(tempfile.gettempdir()) / f"jitguard-{os.geteuid()}"


def _record_json(created: float | str = "now") -> str:
    stamp = time.time() if created == "now" else created
    return json.dumps(
        {
            "schema": "jitguard.failure-cache/1",
            "module": "m",
            "fingerprint": "fp",
            "outcome": "failure",
            "findings": [LIBCUDA.to_json()],
            "log_path": None,
            "created": stamp,
            "jitguard": "0.1.0",
            "source_digest": None,
        }
    )


# --- a read-only cache dir


def test_cache_clear_on_a_read_only_cache_dir_says_so_and_exits_1(tmp_path: Path) -> None:
    mnt = tmp_path / "mnt"
    cache = mnt / "cache"
    prepare = (
        f"mkdir -p {cache}/outcomes && printf '%s' '{_record_json()}' > {cache}/outcomes/m@x.json\n"
        f"mount -o remount,ro {mnt}"
    )
    env = base_env(cache)
    proc = on_tmpfs(mnt, [sys.executable, "-m", "jitguard", "cache", "clear", "--yes"], env, prepare=prepare)
    assert_no_traceback(proc)
    assert proc.returncode == 1, proc.stderr
    assert "read-only" in proc.stderr.lower() and str(cache) in proc.stderr
    listing = on_tmpfs(mnt, [sys.executable, "-m", "jitguard", "cache", "list"], env, prepare=prepare)
    assert_no_traceback(listing)
    assert listing.returncode == 0 and "link-missing-libcuda" in listing.stdout


# --- a cache dir that is a file


def test_recording_into_a_cache_dir_that_is_a_file_is_skipped_not_raised(tmp_path: Path) -> None:
    blocker = tmp_path / "cache"
    blocker.write_text("a file where the cache dir should be")
    cache = FailureCache(blocker)
    assert cache.record_failure("m", "fp", [LIBCUDA]) is None
    assert cache.record_success("m", "fp") is None
    assert cache.get("m", "fp") is None and cache.entries() == [] and cache.clear() == 0
    assert JobMemoryStore(blocker).observe("m", 8 * 1024**3) is None


def test_a_build_with_a_cache_dir_that_is_a_file_keeps_its_log_in_the_temp_fallback(tmp_path: Path) -> None:
    blocker = tmp_path / "cache"
    blocker.write_text("a file where the cache dir should be")
    manifest = tiny_project(tmp_path / "p")
    proc = jitguard(["build", "ninja", str(manifest), "--json", "--progress", "none"], base_env(blocker))
    assert_no_traceback(proc)
    assert proc.returncode == 0, proc.stderr
    log_path = Path(json.loads(proc.stdout)["log_path"])
    assert log_path.is_relative_to(_fallback_dir()) and log_path.is_file()


def test_doctor_names_the_fallback_the_build_really_uses(tmp_path: Path) -> None:
    blocker = tmp_path / "cache"
    blocker.write_text("a file where the cache dir should be")
    proc = jitguard(["doctor", "--backend", "torch"], base_env(blocker, COLUMNS="400"))
    assert_no_traceback(proc)
    assert "cache-dir-unwritable" in proc.stdout
    assert str(_fallback_dir()) in proc.stdout


# --- a full disk


def test_a_build_on_a_full_disk_keeps_its_log_in_the_temp_fallback(tmp_path: Path) -> None:
    mnt = tmp_path / "mnt"
    manifest = tiny_project(tmp_path / "p")
    env = base_env(mnt / "cache")
    command = [
        sys.executable,
        "-m",
        "jitguard",
        "build",
        "ninja",
        str(manifest),
        "--json",
        "--progress",
        "none",
    ]
    proc = on_tmpfs(mnt, command, env, prepare=f"mkdir -p {mnt}/cache\n" + fill_disk(mnt))
    assert_no_traceback(proc)
    assert proc.returncode == 0, proc.stderr
    log_path = Path(json.loads(proc.stdout)["log_path"])
    assert log_path.is_relative_to(_fallback_dir())


def test_recording_on_a_full_disk_is_skipped_not_raised(tmp_path: Path) -> None:
    mnt = tmp_path / "mnt"
    code = (
        "from jitguard.state.failure_cache import FailureCache; from jitguard.findings.model import Finding\n"
        f"c = FailureCache({str(mnt / 'cache')!r})\n"
        "print(c.record_failure('m', 'fp', [Finding('link-missing-libcuda', 'error', 't', 'c')]))"
    )
    proc = on_tmpfs(mnt, python(code), base_env(mnt / "cache"), prepare=fill_disk(mnt))
    assert_no_traceback(proc)
    assert proc.returncode == 0 and proc.stdout.strip() == "None", proc.stderr


def test_a_log_that_fills_the_disk_mid_build_does_not_stop_the_build(tmp_path: Path) -> None:
    mnt = tmp_path / "mnt"
    spam = "python3 -c \"import sys; [print('x' * 200) for _ in range(3000)]; open('$out', 'w').write('ok')\""
    manifest = tmp_path / "p" / "build.ninja"
    manifest.parent.mkdir()
    manifest.write_text(f"rule spam\n  command = {spam}\nbuild a.txt: spam\nbuild b.txt: spam\n")
    command = [
        *[sys.executable, "-m", "jitguard", "build", "ninja", str(manifest)],
        *["--progress", "none", "--stall-timeout", "30", "--jobs", "1"],
    ]
    proc = on_tmpfs(mnt, command, base_env(mnt / "cache"), size="256k")
    assert_no_traceback(proc)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "p" / "a.txt").exists() and (tmp_path / "p" / "b.txt").exists()
    assert "No space left on device" in proc.stderr and "log" in proc.stderr


# --- records jitguard cannot parse


@pytest.mark.parametrize("where", ["outcomes/m@x.json", "job_memory/m.json"])
def test_1000_deep_json_is_a_miss_and_the_cache_can_be_cleared(tmp_path: Path, where: str) -> None:
    cache = tmp_path / "cache"
    (cache / where).parent.mkdir(parents=True)
    (cache / where).write_text(DEEP)
    assert FailureCache(cache).entries() == [] and JobMemoryStore(cache).all() == []
    env = base_env(cache)
    for args in (["cache", "list"], ["cache", "list", "--json"], ["cache", "clear", "--yes"]):
        proc = jitguard(args, env)
        assert_no_traceback(proc)
        assert proc.returncode == 0, (args, proc.stderr)
    assert not (cache / where).exists()


@pytest.mark.skipif(shutil.which("c++") is None, reason="needs a host compiler for the trial link")
def test_a_1000_deep_link_verdict_is_a_miss(tmp_path: Path) -> None:
    from jitguard.facts import libcuda, toolchain

    tc = toolchain.probe()
    first = libcuda.probe(tc, cache_dir=tmp_path)
    if first.error:
        pytest.skip(f"no trial link here: {first.error}")
    (record,) = (tmp_path / "link").glob("*.json")
    record.write_text(DEEP)
    again = libcuda.probe(tc, cache_dir=tmp_path)
    assert not again.cached and again.cuda.status == first.cuda.status


def test_1000_deep_lock_sidecar_means_an_unknown_holder(tmp_path: Path) -> None:
    from jitguard.locks.visible_lock import SIDECAR_SUFFIX, ModuleLock

    lock = ModuleLock(tmp_path / "mod.lock", "mod", timeout=1)
    (tmp_path / f"mod.lock{SIDECAR_SUFFIX}").write_text(DEEP)
    assert lock.holder() is None
    with lock:
        assert lock.held


def test_a_directory_where_an_outcome_file_should_be_is_cleared(tmp_path: Path) -> None:
    cache = FailureCache(tmp_path / "cache")
    squatter = cache.path_for("m", "fp")
    (squatter / "inner").mkdir(parents=True)
    assert cache.record_failure("m", "fp", [LIBCUDA]) is None  # cannot replace a directory: skipped
    assert cache.get("m", "fp") is None and cache.entries() == []
    proc = jitguard(["cache", "clear", "--yes"], base_env(cache.cache_dir))
    assert_no_traceback(proc)
    assert proc.returncode == 0, proc.stderr
    assert not squatter.exists()
    assert cache.record_failure("m", "fp", [LIBCUDA]) is not None


# --- timestamps


@pytest.mark.parametrize("created", [math.nan, math.inf, -math.inf, "future"])
def test_a_record_with_a_non_finite_or_future_time_expires(tmp_path: Path, created: float | str) -> None:
    stamp = time.time() + 3600 if created == "future" else created
    cache = FailureCache(tmp_path / "cache")
    cache.root.mkdir(parents=True, mode=0o700)
    cache.path_for("m", "fp").write_text(_record_json(stamp))
    assert cache.get("m", "fp") is None
    assert cache.lookup("m", "fp") is None
    assert cache.entries() == []
    assert cache.prune() == 1
