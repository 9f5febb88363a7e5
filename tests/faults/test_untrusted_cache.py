"""Foreign files and untrusted cache dirs: jitguard trusts its cache dir the way ssh and pip trust theirs.

A cache dir that other users can write, or that another user owns, is refused with a finding and never read;
a file in it that another user owns is ignored. Every record below is planted for real (chown to uid 65534,
chmod 0777), and each would change a decision if it were believed."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import textwrap
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest

from fault_makers import FOREIGN_UID, as_nobody, base_env, chown_foreign, jitguard
from jitguard.findings.model import Finding
from jitguard.state.failure_cache import FailureCache
from jitguard.state.job_memory import JobMemoryStore

LIBCUDA = Finding("link-missing-libcuda", "error", "no libcuda", "links -lcuda", ("cannot find -lcuda",))
PLANTED_JOB_MEMORY = 10 * 1024**4  # 10 TiB per job: every build would run with one job


def _cache_with_failure(path: Path) -> FailureCache:
    cache = FailureCache(path)
    assert cache.record_failure("gdn_prefill_sm90", "fp", [LIBCUDA]) is not None
    assert cache.get("gdn_prefill_sm90", "fp") is not None  # believed while the dir is private
    return cache


def test_a_world_writable_cache_dir_is_not_read(tmp_path: Path) -> None:
    cache = _cache_with_failure(tmp_path / "cache")
    cache.cache_dir.chmod(0o777)
    assert cache.get("gdn_prefill_sm90", "fp") is None
    assert cache.entries() == []


def test_a_group_writable_outcomes_dir_is_not_read(tmp_path: Path) -> None:
    cache = _cache_with_failure(tmp_path / "cache")
    os.chown(cache.root, -1, 4242)  # a group that is not ours
    cache.root.chmod(0o770)
    assert cache.get("gdn_prefill_sm90", "fp") is None


def test_a_cache_dir_owned_by_another_user_is_not_read(tmp_path: Path) -> None:
    cache = _cache_with_failure(tmp_path / "cache")
    chown_foreign(cache.cache_dir)
    assert cache.get("gdn_prefill_sm90", "fp") is None


def test_a_record_owned_by_another_user_is_ignored(tmp_path: Path) -> None:
    cache = _cache_with_failure(tmp_path / "cache")
    chown_foreign(cache.path_for("gdn_prefill_sm90", "fp"))
    assert cache.get("gdn_prefill_sm90", "fp") is None
    assert cache.clear() == 1  # but it can still be cleared


def test_a_planted_job_memory_record_does_not_decide_the_parallelism(tmp_path: Path) -> None:
    from fault_makers import tiny_project
    from jitguard.config import MemorySpec
    from jitguard.supervise.runner import BuildOptions, run_ninja

    cache = tmp_path / "cache"
    store = JobMemoryStore(cache)
    store.observe("m", PLANTED_JOB_MEMORY)
    assert store.estimate("m") == PLANTED_JOB_MEMORY  # believed while it is ours
    chown_foreign(store.root / "m.json")
    assert store.estimate("m") is None
    options = BuildOptions(cache_dir=cache, progress="none", memory_budget=MemorySpec(bytes=64 * 1024**3))
    result = run_ninja(tmp_path / "p", tiny_project(tmp_path / "p"), module="m", options=options)
    assert result.job_memory != PLANTED_JOB_MEMORY


def test_a_job_memory_record_in_a_world_writable_dir_is_ignored(tmp_path: Path) -> None:
    store = JobMemoryStore(tmp_path / "cache")
    store.observe("m", PLANTED_JOB_MEMORY)
    store.root.chmod(0o777)
    assert store.estimate("m") is None


@pytest.fixture
def reachable_dir() -> Iterator[Path]:
    """A directory every user can reach (pytest's tmp_path sits under a 0700 directory)."""
    path = Path(tempfile.mkdtemp(prefix="jitguard-faults-", dir="/tmp"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path)


def test_a_record_root_planted_in_an_unprivileged_users_cache_is_ignored(reachable_dir: Path) -> None:
    """The non-root view: a process running as nobody, whose cache dir holds a record root wrote there."""
    cache_dir = reachable_dir / "cache"
    _cache_with_failure(cache_dir)  # written by root: every file is root's
    for path in [cache_dir, *cache_dir.rglob("*")]:
        os.chown(path, FOREIGN_UID, FOREIGN_UID)
    record = FailureCache(cache_dir).path_for("gdn_prefill_sm90", "fp")
    os.chown(record, 0, 0)
    record.chmod(0o644)  # readable by nobody: only its owner makes it foreign
    code = textwrap.dedent(
        f"""
        from jitguard.state.failure_cache import FailureCache
        cache = FailureCache({str(cache_dir)!r})
        print(cache.get("gdn_prefill_sm90", "fp") is None, len(cache.entries()))
        """
    )
    proc = as_nobody(code, base_env(cache_dir))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["True", "0"]


def test_doctor_refuses_a_world_writable_cache_dir_with_a_finding(tmp_path: Path) -> None:
    from jitguard.facts import disk
    from jitguard.findings import checks_system

    cache = tmp_path / "cache"
    cache.mkdir()
    cache.chmod(0o777)
    facts = SimpleNamespace(
        flashinfer=SimpleNamespace(workspace_dir=tmp_path / "ws"), disk=disk.probe([cache])
    )
    found = checks_system.check(facts, "torch")  # type: ignore[arg-type]  # reads only these two facts
    untrusted = [f for f in found if f.code == "cache-dir-untrusted"]
    assert len(untrusted) == 1, [f.code for f in found]
    assert "writable by every user" in untrusted[0].cause
    assert any(fix.command == f"chmod 700 {cache}" for fix in untrusted[0].fixes)


def test_cache_list_on_a_cache_dir_owned_by_another_user_says_it_is_refused(tmp_path: Path) -> None:
    cache = _cache_with_failure(tmp_path / "cache")
    chown_foreign(cache.cache_dir)
    proc = jitguard(["cache", "list"], base_env(cache.cache_dir))
    assert proc.returncode == 0, proc.stderr
    assert "gdn_prefill_sm90" not in proc.stdout
    assert "owned by another user" in proc.stdout + proc.stderr
    assert "cache-dir-untrusted" in proc.stdout + proc.stderr


@pytest.mark.skipif(shutil.which("c++") is None, reason="needs a host compiler for the trial link")
def test_a_planted_link_verdict_does_not_flip_missing_libcuda_to_ok(tmp_path: Path) -> None:
    from jitguard.facts import libcuda, toolchain

    env = {k: v for k, v in os.environ.items() if k not in ("FLASHINFER_EXTRA_LDFLAGS", "LIBRARY_PATH")}
    tc = toolchain.probe(env)
    cache = tmp_path / "cache"
    first = libcuda.probe(tc, env, cache_dir=cache)
    if first.cuda.ok or first.error:
        pytest.skip("needs a machine where -lcuda does not link (and a working trial link)")
    (record,) = (cache / "link").glob("*.json")
    data = json.loads(record.read_text())
    data["trials"]["cuda"].update(status="ok", returncode=0, output="")
    record.write_text(json.dumps(data))
    assert libcuda.probe(tc, env, cache_dir=cache).cuda.ok  # our own record is believed
    for plant in ("world-writable dir", "foreign file"):
        if plant == "world-writable dir":
            cache.chmod(0o777)
        else:
            cache.chmod(0o700)
            chown_foreign(record)
        again = libcuda.probe(tc, env, cache_dir=cache)
        assert not again.cached, plant
        assert again.cuda.status == "missing", plant
