"""Locks and compile slots leave a network file system for a local directory: the mount table is given as
text (real mountinfo lines naming this test's directories nfs4 or lustre), and the locks taken are real flocks."""

from __future__ import annotations

import logging
import os
import socket
import stat
import tempfile
import threading
from pathlib import Path

import pytest

from jitguard.errors import LockTimeout
from jitguard.locks import lock_dir as lock_dir_module
from jitguard.locks.lock_dir import local_root, lock_dir, lock_path_for
from jitguard.locks.visible_lock import ModuleLock
from jitguard.supervise.slots import host_slots_dir


@pytest.fixture
def places(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    """A remote (nfs4) and a local directory, $TMPDIR local, and a process that has not warned yet."""
    remote, local, tmp = tmp_path / "remote", tmp_path / "local", tmp_path / "tmp"
    for d in (remote, local, tmp):
        d.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    monkeypatch.setattr(lock_dir_module, "_said", threading.Event())
    return {"remote": remote, "local": local, "tmp": tmp}


def table(*lines: str) -> str:
    return "\n".join([*lines, "1 0 259:2 / / rw,relatime - ext4 /dev/nvme0n1p2 rw", ""])


def nfs(point: Path) -> str:
    return f"52 1 0:52 / {point} rw,relatime shared:1 - nfs4 fs01:/export/home rw,vers=4.2,hard,proto=tcp"


def test_a_cache_dir_on_nfs_keeps_its_locks_and_slots_in_a_private_local_dir(
    places: dict[str, Path], caplog: pytest.LogCaptureFixture
) -> None:
    mounts = table(nfs(places["remote"]))
    root = places["tmp"] / f"jitguard-{os.geteuid()}"
    with caplog.at_level(logging.WARNING, logger="jitguard"):
        locks = lock_dir(places["remote"] / "cache", "locks", table=mounts)
        slots = host_slots_dir(places["remote"] / "cache", mount_table=mounts)
        moved = lock_path_for(places["remote"] / "ws" / "gdn_prefill_sm90.lock", table=mounts)
    assert locks == root / "locks" and locks.is_dir()
    assert slots == root / "slots" / socket.gethostname()
    assert moved.parent == root / "locks" and moved.name.startswith("gdn_prefill_sm90-")
    assert stat.S_IMODE(root.stat().st_mode) == 0o700
    assert not (places["remote"] / "cache").exists()  # nothing made on the remote side
    said = [r.getMessage() for r in caplog.records if "network file system" in r.getMessage()]
    assert len(said) == 1, said  # once per process
    assert "nfs4 at" in said[0] and str(root) in said[0] and "JITGUARD_CACHE_DIR" in said[0]


def test_a_local_cache_dir_keeps_its_locks(places: dict[str, Path], caplog: pytest.LogCaptureFixture) -> None:
    mounts = table(nfs(places["remote"]))
    with caplog.at_level(logging.WARNING, logger="jitguard"):
        assert (
            lock_dir(places["local"] / "cache", "locks", table=mounts) == places["local"] / "cache" / "locks"
        )
        lock = places["local"] / "build" / ".jitguard.lock"
        assert lock_path_for(lock, table=mounts) == lock
    assert not caplog.records


def test_a_module_lock_on_lustre_excludes_through_its_local_stand_in(places: dict[str, Path]) -> None:
    mounts = table(f"60 1 0:60 / {places['remote']} rw,relatime - lustre 10.2.0.1@o2ib:/scratch rw,noflock")
    path = places["remote"] / "cached_ops" / "tmp" / "gdn_prefill_sm90.lock"
    first = ModuleLock(path, "gdn_prefill_sm90", timeout=0, mount_table=mounts)
    second = ModuleLock(path, "gdn_prefill_sm90", timeout=0, mount_table=mounts)
    assert first.requested_path == path and first.lock_path == second.lock_path != path
    with first, pytest.raises(LockTimeout):
        second.acquire()  # a real flock on the same local file, from another open file description
    with second:
        assert second.held
    assert not path.exists()


def test_the_local_root_skips_a_tmpdir_on_a_network_file_system(places: dict[str, Path]) -> None:
    mounts = table(nfs(places["tmp"]))
    root = local_root(table=mounts)
    assert not str(root).startswith(str(places["tmp"]))
    assert root.parent in (Path("/tmp"), Path("/dev/shm")) and root.name.startswith("jitguard-")
