"""The ledger's files: one per process under its start id, the last starts kept, a bad file left out."""

from __future__ import annotations

import os
from pathlib import Path

from jitguard.ledger import history
from jitguard.ledger.record import LayerCounts, ProcessRecord


def _record(start: str, pid: int, compiled: int = 0, began: float = 1000.0) -> ProcessRecord:
    return ProcessRecord(
        start, pid, "vllm", "worker", began, layers={"triton": LayerCounts(compiled=compiled)}
    )


def test_each_process_writes_its_own_file_and_a_reader_joins_them(tmp_path: Path) -> None:
    history.write(_record("s1", 11, compiled=1), tmp_path)
    history.write(_record("s1", 12, compiled=2), tmp_path)
    assert sorted(p.name for p in (tmp_path / "starts" / "s1").iterdir()) == ["11.json", "12.json"]
    (start,) = history.read_starts(tmp_path)
    assert start.layers["triton"].compiled == 3 and len(start.processes) == 2
    assert oct((tmp_path / "starts" / "s1" / "11.json").stat().st_mode & 0o777) == "0o600"


def test_only_the_last_starts_are_kept(tmp_path: Path) -> None:
    for n in range(8):
        history.write(_record(f"s{n}", 1, began=1000.0 + n), tmp_path, keep=3)
        os.utime(tmp_path / "starts" / f"s{n}", (1000 + n, 1000 + n))  # written in this order
    assert sorted(p.name for p in (tmp_path / "starts").iterdir()) == ["s5", "s6", "s7"]
    assert [s.start_id for s in history.read_starts(tmp_path, limit=2)] == ["s7", "s6"]


def test_the_start_being_written_is_never_the_one_pruned(tmp_path: Path) -> None:
    history.write(_record("new", 1), tmp_path, keep=1)
    os.utime(tmp_path / "starts" / "new", (1, 1))  # older on disk than the one that comes next
    history.write(_record("other", 1), tmp_path, keep=1)
    history.write(_record("new", 2), tmp_path, keep=1)
    assert [p.name for p in (tmp_path / "starts").iterdir()] == ["new"]


def test_a_damaged_or_foreign_file_is_left_out(tmp_path: Path) -> None:
    history.write(_record("s1", 11, compiled=1), tmp_path)
    (tmp_path / "starts" / "s1" / "12.json").write_bytes(os.urandom(200))
    (tmp_path / "starts" / "s1" / "13.json").write_text('{"schema": "jitguard.doctor/1"}')
    os.chmod(tmp_path / "starts" / "s1" / "13.json", 0o600)
    os.mkfifo(tmp_path / "starts" / "s1" / "14.json")  # a pipe never hangs the reader
    (start,) = history.read_starts(tmp_path)
    assert [p.pid for p in start.processes] == [11]


def test_no_starts_dir_is_no_starts(tmp_path: Path) -> None:
    assert history.read_starts(tmp_path / "missing") == []
    (tmp_path / "file").write_text("x")
    assert history.read_starts(tmp_path / "file") == []
