"""Disk facts on real directories. Root bypasses permission bits, so "not writable" is shown the ways that
hold for root too (a file where a directory should be, a read-only mount, a pseudo file system) and, for
permission bits, from a real process that dropped to an unprivileged user."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from jitguard import fileio
from jitguard.facts import disk


def test_existing_writable_dir(tmp_path: Path) -> None:
    facts = disk.probe_path(tmp_path)
    assert facts.exists and facts.is_dir
    assert facts.existing == str(tmp_path)
    assert facts.writable
    assert facts.error is None
    assert facts.free_bytes is not None and facts.free_bytes > 0
    assert facts.owner_uid == os.geteuid()
    assert list(tmp_path.iterdir()) == []  # the write probe leaves nothing behind


def test_missing_dir_is_judged_by_its_first_existing_ancestor(tmp_path: Path) -> None:
    facts = disk.probe_path(tmp_path / "a" / "b" / "c")
    assert not facts.exists
    assert facts.existing == str(tmp_path)
    assert facts.writable
    assert list(tmp_path.iterdir()) == []


def test_a_file_where_a_directory_should_be(tmp_path: Path) -> None:
    blocker = tmp_path / "cache"
    blocker.write_text("not a dir")
    facts = disk.probe_path(blocker / "flashinfer")
    assert not facts.writable
    assert facts.existing == str(blocker)
    assert facts.error is not None and "not a directory" in facts.error

    itself = disk.probe_path(blocker)
    assert itself.exists and not itself.is_dir
    assert not itself.writable
    assert itself.error is not None and "not a directory" in itself.error


def test_pseudo_file_system_refuses_files_even_to_root() -> None:
    facts = disk.probe_path(Path("/proc/jitguard-no-such-dir"))
    assert facts.existing == "/proc"
    assert not facts.writable
    assert facts.error is not None


def test_probe_keeps_order_and_finds_entries(tmp_path: Path) -> None:
    facts = disk.probe([tmp_path / "x", tmp_path])
    assert [p.path for p in facts.paths] == [str(tmp_path / "x"), str(tmp_path)]
    assert facts.get(tmp_path) is facts.paths[1]
    assert facts.get(tmp_path / "nope") is None


@pytest.mark.parametrize(
    ("mode", "uid", "gid", "expected"),
    [
        (0o755, 1000, 1000, ()),
        (0o777, 1000, 1000, ("writable by every user (o+w, no sticky bit)",)),
        (0o1777, 1000, 1000, ()),  # /tmp-style: others cannot replace our entries
        (0o775, 1000, 1000, ()),  # group-writable by our own primary group (user private groups)
        (0o775, 1000, 2000, ("writable by group 2000 (g+w, no sticky bit)",)),
        (0o755, 2000, 1000, ("owned by another user (uid 2000)",)),
        (0o755, 0, 1000, ()),  # root-owned: root can write anything anyway
    ],
)
def test_others_can_write_mode_logic(mode: int, uid: int, gid: int, expected: tuple[str, ...]) -> None:
    assert fileio.others_can_write(stat.S_IFDIR | mode, uid, gid, euid=1000, egid=1000) == expected


def test_real_world_writable_dir_is_shared_and_sticky_is_not(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    facts = disk.probe_path(shared)
    assert facts.shared_writable
    assert facts.mode == "0777"

    shared.chmod(0o1777)
    assert not disk.probe_path(shared).shared_writable


AS_NOBODY = """
import json, os, sys
from jitguard.facts import disk
from jitguard.facts.serialize import to_plain
os.setgroups([])
os.setgid(65534)
os.setuid(65534)
print(json.dumps([to_plain(disk.probe_path(__import__("pathlib").Path(p))) for p in sys.argv[1:]]))
"""


def probe_as_nobody(*paths: Path) -> list[dict[str, object]]:
    """Probe from a real process running as uid/gid 65534 (modules are imported before dropping root)."""
    if os.geteuid() != 0:
        pytest.skip("needs root to start a process as another user")
    proc = subprocess.run(
        [sys.executable, "-c", AS_NOBODY, *map(str, paths)], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    result: list[dict[str, object]] = json.loads(proc.stdout)
    return result


@pytest.fixture
def open_dir() -> Iterator[Path]:
    """A root-owned 0755 directory every user can reach (pytest's tmp_path sits under a 0700 directory)."""
    path = Path(tempfile.mkdtemp(prefix="jitguard-disk-", dir="/tmp"))
    path.chmod(0o755)
    yield path
    for sub in path.rglob("*"):
        if sub.is_dir():
            sub.chmod(0o755)
    shutil.rmtree(path)


def test_root_owned_dir_is_not_writable_for_another_user(open_dir: Path) -> None:
    owned = open_dir / "rootonly"
    owned.mkdir(mode=0o755)
    seen = probe_as_nobody(owned, owned / "sub")
    assert [s["writable"] for s in seen] == [False, False]
    assert [s["existing"] for s in seen] == [str(owned), str(owned)]
    assert "not writable by uid 65534" in str(seen[0]["error"])
    assert seen[0]["owner_uid"] == 0
    assert seen[0]["others_can_write"] == []  # root-owned is not "another user" (root can write anyway)


def test_unsearchable_dir_is_a_fact_not_a_crash(open_dir: Path) -> None:
    locked = open_dir / "locked"
    (locked / "inner").mkdir(parents=True)
    locked.chmod(0o700)
    seen = probe_as_nobody(locked / "inner" / "cache")
    assert seen[0]["writable"] is False
    assert seen[0]["existing"] == str(locked)  # the deepest directory nobody can see into
    assert seen[0]["error"]


def test_read_only_mount(tmp_path: Path) -> None:
    target = tmp_path / "ro"
    target.mkdir()
    script = (
        "from jitguard.facts import disk; import json, sys; from jitguard.facts.serialize import to_plain; "
        "print(json.dumps(to_plain(disk.probe_path(__import__('pathlib').Path(sys.argv[1])))))"
    )
    # A private mount namespace, so the read-only tmpfs is gone when the process ends.
    proc = subprocess.run(
        [
            "unshare",
            "--mount",
            "sh",
            "-c",
            'mount -t tmpfs -o ro tmpfs "$1" && exec "$0" -c "$2" "$1/cache"',
            sys.executable,
            str(target),
            script,
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    if proc.returncode != 0 and ("mount" in proc.stderr or "unshare" in proc.stderr):
        pytest.skip(f"cannot mount a read-only file system here: {proc.stderr.strip()}")
    assert proc.returncode == 0, proc.stderr
    seen = json.loads(proc.stdout)
    assert seen["read_only_fs"] is True
    assert seen["writable"] is False
    assert "read-only" in seen["error"]
