"""jitguard's file primitives on real files: trust rules, reads that follow no link and read no foreign or
odd file, atomic private writes, the build log, and where state goes when the cache dir cannot take it."""

from __future__ import annotations

import json
import os
import stat
import tempfile
from pathlib import Path

import pytest

from jitguard import fileio

FOREIGN_UID = 65534


@pytest.fixture
def root(tmp_path: Path) -> Path:
    path = tmp_path / "cache"
    path.mkdir(mode=0o700)
    return path


def _need_root() -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root to chown a file to another user")


def test_safe_names_stay_distinct_and_inside_their_directory() -> None:
    assert fileio.safe_name("gdn_prefill_sm90") == "gdn_prefill_sm90"
    odd = [fileio.safe_name(n) for n in ("../../etc/passwd", "a/b", "a_b", "a b", "x" * 200)]
    assert len(set(odd)) == len(odd)
    assert all("/" not in n and len(n) <= 89 for n in odd)


@pytest.mark.parametrize(
    ("mode", "uid", "gid", "reasons"),
    [
        (0o700, 1000, 1000, ()),
        (0o755, 1000, 1000, ()),
        (0o775, 1000, 1000, ()),  # our own (user private) group
        (0o1777, 1000, 1000, ("writable by every user (o+w)",)),  # the sticky bit is no excuse here
        (0o770, 1000, 50, ("writable by group 50 (g+w)",)),
        (0o700, 0, 0, ("owned by another user (uid 0)",)),  # nor is root
    ],
)
def test_untrusted_reasons_are_stricter_than_for_a_shared_directory(
    mode: int, uid: int, gid: int, reasons: tuple[str, ...]
) -> None:
    got = fileio.others_can_write(
        mode, uid, gid, euid=1000, egid=1000, sticky_protects=False, root_is_trusted=False
    )
    assert got == reasons


def test_json_round_trips_private_and_redacted(root: Path) -> None:
    path = root / "sub" / "record.json"
    fileio.write_json(path, {"key": "k", "evidence": ["token=abcdef123"]}, root=root)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert fileio.read_json(path, root=root) == {"key": "k", "evidence": ["token=<redacted>"]}


def test_a_write_replaces_a_link_and_leaves_its_target(root: Path, tmp_path: Path) -> None:
    target = tmp_path / "target"
    target.write_text("precious")
    (root / "record.json").symlink_to(target)
    fileio.write_atomic(root / "record.json", b"{}", root=root)
    assert target.read_text() == "precious" and not (root / "record.json").is_symlink()


def test_no_link_is_read_neither_as_the_file_nor_as_a_directory_below_the_root(
    root: Path, tmp_path: Path
) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    (elsewhere / "r.json").write_text('{"a": 1}')
    (root / "r.json").symlink_to(elsewhere / "r.json")
    (root / "sub").symlink_to(elsewhere)
    assert fileio.read_json(root / "r.json", root=root) is None
    assert fileio.read_json(root / "sub" / "r.json", root=root) is None
    assert fileio.read_json(elsewhere / "r.json", root=elsewhere) == {"a": 1}  # a linked root is the user's


def test_a_fifo_where_a_record_should_be_is_a_miss_not_a_hang(root: Path) -> None:
    os.mkfifo(root / "r.json")
    assert fileio.read_json(root / "r.json", root=root) is None


def test_a_file_that_others_can_write_or_own_is_not_read(root: Path) -> None:
    path = root / "r.json"
    path.write_text('{"a": 1}')
    path.chmod(0o666)
    assert fileio.read_json(path, root=root) is None
    path.chmod(0o644)
    assert fileio.read_json(path, root=root) == {"a": 1}
    _need_root()
    os.chown(path, FOREIGN_UID, FOREIGN_UID)
    with pytest.raises(fileio.UntrustedPath, match="owned by another user"):
        fileio.read_bytes(path, root=root)


def test_huge_or_deep_json_is_a_miss(root: Path) -> None:
    (root / "deep.json").write_text("[" * 100_000 + "]" * 100_000)
    (root / "huge.json").write_text(json.dumps({"x": "y" * (fileio.MAX_READ_BYTES + 1)}))
    assert fileio.read_json(root / "deep.json", root=root) is None
    assert fileio.read_json(root / "huge.json", root=root) is None


def test_remove_takes_files_links_and_whole_directories(root: Path, tmp_path: Path) -> None:
    (root / "d.json" / "inner").mkdir(parents=True)
    (root / "l.json").symlink_to(tmp_path)
    (root / "f.json").write_text("{}")
    assert fileio.remove_each(fileio.json_files(root)) == (3, [])
    assert list(root.iterdir()) == [] and tmp_path.is_dir()
    assert fileio.remove(root / "gone.json") is False


def test_a_log_is_private_and_refuses_links_and_fifos(root: Path, tmp_path: Path) -> None:
    with fileio.open_log(root / "logs" / "a.log") as log:
        log.write(b"ghp_A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8\n")
    assert (root / "logs" / "a.log").read_bytes() == b"<redacted>\n"
    assert stat.S_IMODE((root / "logs" / "a.log").stat().st_mode) == 0o600
    (root / "link.log").symlink_to(tmp_path / "target")
    with pytest.raises(OSError, match="symbolic link"):
        fileio.open_log(root / "link.log")
    assert not (tmp_path / "target").exists()
    os.mkfifo(root / "fifo.log")
    with pytest.raises(OSError):
        fileio.open_log(root / "fifo.log")


def test_state_goes_to_the_private_temp_dir_when_the_cache_dir_cannot_take_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    blocker = tmp_path / "blocker"
    blocker.write_text("a file where the cache dir should be")
    assert fileio.state_dir(tmp_path / "cache", "logs") == tmp_path / "cache" / "logs"
    fallback = fileio.state_dir(blocker, "logs")
    assert fallback == fileio.fallback_path() / "logs" and fallback.is_dir()
    assert stat.S_IMODE(fileio.fallback_path().stat().st_mode) == 0o700
    world = tmp_path / "world"
    world.mkdir()
    world.chmod(0o777)
    assert fileio.state_dir(world, "slots") == fileio.fallback_path() / "slots"


def test_a_squatted_fallback_name_gives_a_fresh_private_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    fileio.fallback_path().symlink_to(tmp_path)  # planted by someone else
    fresh = fileio.fallback_root()
    assert fresh != fileio.fallback_path() and fresh.parent == tmp_path
    assert stat.S_IMODE(fresh.stat().st_mode) == 0o700
