"""Where jitguard's locks and host-wide compile slots live: on a local file system, never a network one.

flock on NFS, Lustre and the like may not exclude anyone (``facts.filesystems``). ``lock_dir`` and
``lock_path_for`` keep a lock where it is when local, else move it under ``jitguard-<uid>`` in the first local
one of ``$TMPDIR``, ``/tmp``, ``/dev/shm`` (0700, the cache dir's trust rules), the same for every process of
a user on the host; the move is said once per process (docs/design.md "Locks").
"""

from __future__ import annotations

import hashlib
import logging
import tempfile
import threading
from pathlib import Path

from jitguard import fileio
from jitguard.facts.filesystems import (
    LOCK_BASES,
    Mount,
    filesystem_of,
    local_bases,
    read_mount_table,
    resolve,
)

log = logging.getLogger("jitguard.lock")
_said = threading.Event()


def lock_dir(cache_dir: Path, name: str, *, table: str | None = None) -> Path:
    """The directory for locks or slots called ``name`` (``locks``, ``slots``) of ``cache_dir``."""
    table = _table(table)
    mount = filesystem_of(cache_dir, table=table)
    if mount is None or not mount.network:
        return fileio.state_dir(cache_dir, name)
    root = local_root(table=table)
    _say_once(Path(cache_dir), mount, root)
    return fileio.private_dir(root, name)


def lock_path_for(path: Path, *, table: str | None = None) -> Path:
    """Where to take the lock on ``path``: ``path`` itself on a local file system, else a local stand-in."""
    path = Path(path)
    table = _table(table)
    mount = filesystem_of(path.parent, table=table)
    if mount is None or not mount.network:
        return path
    digest = hashlib.sha256(resolve(path).encode()).hexdigest()[:16]
    root = local_root(table=table)
    _say_once(path.parent, mount, root)
    return fileio.private_dir(root, "locks") / f"{fileio.safe_name(path.stem)}-{digest}{path.suffix}"


def local_root(*, table: str | None = None) -> Path:
    """``jitguard-<uid>`` in the first of $TMPDIR, /tmp, /dev/shm on a local file system (created 0700)."""
    for base in local_bases((tempfile.gettempdir(), *LOCK_BASES), table=_table(table)):
        try:
            return fileio.fallback_root(base)
        except OSError:
            continue
    return fileio.fallback_root()  # every candidate remote or refused: the one state_dir falls back to


def _table(table: str | None) -> str:
    """``table``, else this process's mount table ("" when none is readable: nothing is remote then)."""
    if table is not None:
        return table
    read = read_mount_table()
    return read[1] if read else ""


def _say_once(where: Path, mount: Mount, root: Path) -> None:
    if _said.is_set():
        return
    _said.set()
    log.warning(
        "jitguard: %s is on a network file system (%s at %s, from %s), where file locks are unreliable; "
        "jitguard keeps its locks and compile slots in %s instead. Put jitguard's cache and FlashInfer's "
        "workspace on local disk (JITGUARD_CACHE_DIR, FLASHINFER_WORKSPACE_BASE); `jitguard doctor` shows "
        "which directories are remote.",
        where,
        mount.fs_type,
        mount.mount_point,
        mount.source,
        root,
    )
