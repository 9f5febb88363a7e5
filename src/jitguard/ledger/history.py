"""The ledger's files: one per process and start, ``<cache dir>/starts/<start id>/<pid>.json``
(``jitguard.start/1``), written atomically through ``fileio``; the last ``keep`` starts are kept.

One file per process, never one file written by several: vLLM's API server, EngineCore and workers (or
SGLang's schedulers) each write their own under the start id they share, and a reader joins them
(``record.merge``). A damaged, foreign or unreadable file is left out, never an error.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from jitguard import __version__, fileio
from jitguard.ledger.record import ProcessRecord, StartRecord, merge

log = logging.getLogger("jitguard.ledger")
DIR = "starts"
DEFAULT_KEEP = 20
MAX_FILES_PER_START = 256  # processes of one start read back (a TP=8 engine has ~10)


def starts_dir(cache_dir: Path) -> Path:
    return Path(cache_dir) / DIR


def write(record: ProcessRecord, cache_dir: Path, *, keep: int = DEFAULT_KEEP) -> Path:
    """Write ``record`` as its process's file and drop all but the newest ``keep`` starts. Raises OSError."""
    path = starts_dir(cache_dir) / fileio.safe_name(record.start_id) / f"{record.pid}.json"
    fileio.write_json(path, record.to_json(__version__), root=Path(cache_dir))
    prune(cache_dir, keep=keep, spare=path.parent.name)
    return path


def prune(cache_dir: Path, *, keep: int, spare: str = "") -> int:
    """Remove every start directory but the newest ``keep`` (the last written to) and ``spare``; how many
    went."""
    found = _start_dirs(cache_dir)
    doomed = [p for p in found[: max(0, len(found) - max(1, keep))] if p.name != spare]
    removed, _ = fileio.remove_each(doomed)
    return removed


def read_starts(cache_dir: Path, *, limit: int = DEFAULT_KEEP) -> list[StartRecord]:
    """The newest ``limit`` starts on this host, newest first, each with every process's record that reads."""
    records: list[ProcessRecord] = []
    for directory in _start_dirs(cache_dir)[-max(1, limit) :]:
        for path in fileio.json_files(directory)[:MAX_FILES_PER_START]:
            data = fileio.read_json(path, root=Path(cache_dir))
            record = ProcessRecord.from_json(data) if data is not None else None
            if record is not None:
                records.append(record)
    return merge(records)[:limit]


def _start_dirs(cache_dir: Path) -> list[Path]:
    try:
        entries = list(starts_dir(cache_dir).iterdir())
    except OSError:
        return []
    named = [p for p in entries if not p.name.startswith(".") and fileio.is_plain_name(p.name)]
    return sorted(named, key=lambda p: (_mtime(p), p.name))  # oldest first: the last written is the newest


def _mtime(path: Path) -> float:
    try:
        return os.stat(path).st_mtime
    except OSError:
        return 0.0
