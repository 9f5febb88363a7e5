"""Planted symlinks: jitguard never writes, creates or reads through a link in the places it keeps state.

Each test plants a real symlink where jitguard is about to open a file and checks the link's target, a
root-owned file standing for something valuable (these tests run as root, who may write anywhere)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from fault_makers import tiny_project
from jitguard.errors import JitguardError, UsageError
from jitguard.locks.visible_lock import ModuleLock
from jitguard.state.failure_cache import FailureCache
from jitguard.supervise import slots
from jitguard.supervise.runner import BuildOptions, BuildResult, run_ninja

PRECIOUS = "root's own file, not jitguard's\n"


@pytest.fixture
def victim(tmp_path: Path) -> Path:
    path = tmp_path / "victim"
    path.write_text(PRECIOUS)
    path.chmod(0o644)
    return path


def _options(cache: Path) -> BuildOptions:
    return BuildOptions(jobs=1, cache_dir=cache, progress="none", slots_dir=cache / "slots")


def _build(tmp_path: Path, log: Path | None = None) -> BuildResult:
    """A real one-rule build with jitguard's cache in ``tmp_path/cache``."""
    project = tiny_project(tmp_path / "p")
    return run_ninja(project.parent, project, module="m", options=_options(tmp_path / "cache"), log_path=log)


@pytest.fixture
def log(tmp_path: Path) -> Path:
    """Where the build's log will be: a name in the cache dir's logs directory, not created yet."""
    (tmp_path / "cache" / "logs").mkdir(parents=True)
    return tmp_path / "cache" / "logs" / "m.log"


def test_a_build_log_path_that_is_a_planted_link_is_refused_and_its_target_untouched(
    tmp_path: Path, victim: Path, log: Path
) -> None:
    log.symlink_to(victim)
    with pytest.raises(UsageError, match="symbolic link"):
        _build(tmp_path, log)
    assert victim.read_text() == PRECIOUS


def test_a_wrapped_manifest_path_that_is_a_planted_link_is_replaced_not_followed(
    tmp_path: Path, victim: Path, log: Path
) -> None:
    manifest = log.with_name(log.name + ".ninja")
    manifest.symlink_to(victim)
    result = _build(tmp_path, log)
    assert result.attempts == 1 and (tmp_path / "p" / "out.txt").exists()
    assert victim.read_text() == PRECIOUS
    assert not manifest.is_symlink()


def test_a_build_log_is_private_to_its_owner_and_the_cache_dir_is_created_0700(tmp_path: Path) -> None:
    result = _build(tmp_path)
    assert stat.S_IMODE(result.log_path.stat().st_mode) == 0o600
    assert stat.S_IMODE((tmp_path / "cache").stat().st_mode) == 0o700


def test_a_dangling_slot_link_does_not_create_its_target(tmp_path: Path) -> None:
    directory = tmp_path / "slots"
    directory.mkdir()
    target = tmp_path / "elsewhere" / "created-by-jitguard"
    target.parent.mkdir()
    slots.slot_path(directory, 0).symlink_to(target)
    slot = slots.try_acquire(directory, 1)
    assert slot is not None
    slot.release()
    assert not target.exists()
    assert not slots.slot_path(directory, 0).is_symlink()


def test_a_dangling_lock_link_is_refused_and_its_target_not_created(tmp_path: Path) -> None:
    target = tmp_path / "elsewhere" / "created-by-jitguard"
    target.parent.mkdir()
    lock_path = tmp_path / "ws" / "mod.lock"
    lock_path.parent.mkdir()
    lock_path.symlink_to(target)
    with pytest.raises(JitguardError, match="symbolic link") as info:
        ModuleLock(lock_path, "mod", timeout=1).acquire()
    assert type(info.value).__name__ == "LockUnavailable"
    assert not target.exists()


def test_an_outcome_record_that_is_a_link_is_not_read(tmp_path: Path) -> None:
    from jitguard.findings.model import Finding

    elsewhere = FailureCache(tmp_path / "other")
    finding = Finding("link-missing-libcuda", "error", "t", "c")
    elsewhere.record_failure("m", "fp", [finding])
    cache = FailureCache(tmp_path / "cache")
    cache.root.mkdir(parents=True)
    os.symlink(elsewhere.path_for("m", "fp"), cache.path_for("m", "fp"))
    assert cache.get("m", "fp") is None
    assert cache.clear() == 1  # the link goes; its target stays
    assert elsewhere.get("m", "fp") is not None
