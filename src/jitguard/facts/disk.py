"""Disk facts for the directories a build writes to (FlashInfer's workspace, jitguard's cache dir).

Per path: the first existing ancestor (a directory that does not exist yet is created there), free space,
whether we can write (``os.access`` plus a real temporary file, removed at once, in the directory or, when it
does not exist yet, in the ancestor it would be created in: access(2) says yes to root on directories that
still refuse files, such as /proc or a full quota), and whether OTHER users can
write there. The last matters because FlashInfer dlopens any ``.so`` it finds in its cache: a directory others
can write is a directory others can plant code in. ``untrusted`` applies jitguard's stricter rules for its own
state (``jitguard.fileio.untrusted_reasons``: no sticky-bit or root allowance) to an existing directory.

An unreadable directory, a file where a directory should be, or a vanished path is a fact (``error``),
never an exception.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from jitguard.fileio import LOADED, owner_and_mode, untrusted_reasons


@dataclass(frozen=True)
class PathFacts:
    path: str
    exists: bool
    is_dir: bool
    existing: str | None  # the path itself when it exists, else its first existing ancestor
    free_bytes: int | None  # for an unprivileged user (f_bavail)
    total_bytes: int | None
    read_only_fs: bool
    writable: bool  # we can create files in the directory (or create the directory in ``existing``)
    others_can_write: tuple[str, ...]  # why other users can write ``existing``; empty when only we can
    owner_uid: int | None
    mode: str | None  # octal permission bits of ``existing``, e.g. "0755"
    error: str | None  # what went wrong probing, e.g. "not a directory" or an OSError
    # Why jitguard would not keep its own state in the path (an existing directory); empty when it would.
    untrusted: tuple[str, ...] = ()

    @property
    def shared_writable(self) -> bool:
        return bool(self.others_can_write)


@dataclass(frozen=True)
class DiskFacts:
    paths: tuple[PathFacts, ...]

    def get(self, path: str | Path) -> PathFacts | None:
        wanted = str(Path(path))
        return next((p for p in self.paths if p.path == wanted), None)


def probe(paths: Iterable[str | Path]) -> DiskFacts:
    return DiskFacts(paths=tuple(probe_path(Path(p)) for p in paths))


def probe_path(path: Path) -> PathFacts:
    path = Path(os.path.abspath(os.path.expanduser(str(path))))
    error: str | None = None
    try:
        exists = path.exists()
        is_dir = path.is_dir()
    except OSError as exc:  # e.g. a parent without search permission
        exists, is_dir, error = False, False, _describe(exc)

    existing = path if exists else _first_existing_ancestor(path)
    if exists and not is_dir:
        error = error or f"{path} exists but is not a directory"
    if existing is None:
        return PathFacts(str(path), exists, is_dir, None, None, None, False, False, (), None, None, error)

    free = total = None
    read_only = False
    try:
        vfs = os.statvfs(existing)
        free, total = vfs.f_bavail * vfs.f_frsize, vfs.f_blocks * vfs.f_frsize
        read_only = bool(vfs.f_flag & os.ST_RDONLY)
    except OSError as exc:
        error = error or _describe(exc)

    owner = mode = None
    others: tuple[str, ...] = ()
    untrusted: tuple[str, ...] = ()
    try:
        st = existing.stat()
        owner, mode = owner_and_mode(st)
        others = LOADED.reasons(st)
        if exists and is_dir:
            untrusted = untrusted_reasons(st)
    except OSError as exc:
        error = error or _describe(exc)

    writable = False
    if not existing.is_dir():
        error = error or f"{existing} is not a directory, so {path} cannot be created"
    elif read_only:
        error = error or f"{existing} is on a read-only file system"
    else:
        # A real file, removed at once: the only answer that holds for root (access(2) says yes to root
        # everywhere) and on full or quota-limited file systems. When ``path`` does not exist yet the file
        # goes to the ancestor the directories would be created in.
        writable, write_error = _try_create(existing)
        if not writable:
            error = error or (write_error if exists else f"cannot create {path}: {write_error}")
    return PathFacts(
        path=str(path),
        exists=exists,
        is_dir=is_dir,
        existing=str(existing),
        free_bytes=free,
        total_bytes=total,
        read_only_fs=read_only,
        writable=writable,
        others_can_write=others,
        owner_uid=owner,
        mode=mode,
        error=error,
        untrusted=untrusted,
    )


def _first_existing_ancestor(path: Path) -> Path | None:
    for parent in path.parents:
        try:
            if parent.exists():
                return parent
        except OSError:
            continue
    return None


def _try_create(directory: Path) -> tuple[bool, str | None]:
    if not os.access(directory, os.W_OK | os.X_OK):
        return False, f"{directory} is not writable by uid {os.geteuid()}"
    try:
        fd, name = tempfile.mkstemp(prefix=".jitguard-probe-", dir=directory)
    except OSError as exc:
        return False, _describe(exc)
    os.close(fd)
    with contextlib.suppress(OSError):
        os.unlink(name)
    return True, None


def _describe(exc: OSError) -> str:
    where = f": {exc.filename}" if exc.filename else ""
    return f"{type(exc).__name__}: {exc.strerror or exc}{where}"
