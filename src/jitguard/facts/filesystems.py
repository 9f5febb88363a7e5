"""The file system a path lives on, from the mount table, and whether it is a network file system.

Locks and caches misbehave on network file systems: flock there is emulated with byte-range locks (NFS, lost
when the server restarts) or refused (Lustre without ``-o flock``: ENOSYS), so FlashInfer's workspace lock is
unreliable (flashinfer#3777); Triton's cache breaks on them (``os.removedirs`` meets EBUSY from NFS's
"silly renamed" files: triton#11512). ``os.statvfs`` does not say which file system holds a path; the mount
table does: ``/proc/self/mountinfo`` (this process's mount namespace), else ``/proc/mounts``. The mount that
holds a path is the one whose mount point is the longest prefix of the resolved path; of equal ones, the last
(a later mount covers an earlier one at the same place).

Pure functions over the table's text; ``read_mount_table`` is the one read, ``probe`` the one entry point for
``collect()``.
"""

from __future__ import annotations

import os
import re
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

MOUNT_TABLES = ("/proc/self/mountinfo", "/proc/mounts")
# Where a local directory for locks is looked for after $TMPDIR (jitguard.locks.lock_dir).
LOCK_BASES = ("/tmp", "/dev/shm")
# Types whose files live on another machine (or a cluster), where flock and rename-heavy caches are not safe.
NETWORK_TYPES = frozenset(
    {
        "nfs",
        "nfs4",
        "lustre",
        "cifs",
        "smb3",
        "smbfs",
        "afs",
        "glusterfs",
        "fuse.glusterfs",
        "ceph",
        "fuse.ceph",
        "fuse.ceph-fuse",
        "gpfs",
        "beegfs",
        "fhgfs",
        "9p",
        "panfs",
        "pvfs2",
        "orangefs",
        "wekafs",
        "gfs2",
        "ocfs2",
        "fuse.sshfs",
        "fuse.s3fs",
        "fuse.gcsfuse",
        "fuse.rclone",
        "fuse.juicefs",
        "fuse.goofys",
        "fuse.mountpoint-s3",
        "fuse.blobfuse2",
        "fuse.davfs",
    }
)
_ESCAPE = re.compile(r"\\([0-7]{3})")


@dataclass(frozen=True)
class Mount:
    """One line of the mount table."""

    mount_point: str
    fs_type: str
    source: str

    @property
    def network(self) -> bool:
        return is_network(self.fs_type)


@dataclass(frozen=True)
class PathFilesystem:
    """Where one directory jitguard or a compiler writes to lives. ``mount`` is None when the table could
    not be read or covers nothing (then nothing is known, and nothing is reported)."""

    role: str  # "cache_dir", "flashinfer_workspace", "triton_cache_dir"
    path: str
    resolved: str
    mount: Mount | None

    @property
    def network(self) -> bool:
        return self.mount is not None and self.mount.network


@dataclass(frozen=True)
class FilesystemFacts:
    paths: tuple[PathFilesystem, ...]
    table: str | None  # the mount table read, e.g. /proc/self/mountinfo; None when none could be
    error: str | None = None
    # The first of $TMPDIR, /tmp, /dev/shm on a local file system: where locks go when the cache dir is remote.
    lock_base: str | None = None

    def get(self, role: str) -> PathFilesystem | None:
        return next((p for p in self.paths if p.role == role), None)


def is_network(fs_type: str) -> bool:
    return fs_type in NETWORK_TYPES or fs_type.startswith("nfs")


def parse(text: str) -> tuple[Mount, ...]:
    """Every mount of a table in the ``/proc/self/mountinfo`` format (``... - TYPE SOURCE ...``) or the
    ``/proc/mounts`` one (``SOURCE POINT TYPE ...``); lines that fit neither are skipped."""
    mounts = []
    for line in text.splitlines():
        fields = line.split()
        if "-" in fields[6:]:  # mountinfo: optional fields end at a lone "-"
            dash = fields.index("-", 6)
            if len(fields) > dash + 2:
                mounts.append(Mount(_unescape(fields[4]), fields[dash + 1], _unescape(fields[dash + 2])))
        elif len(fields) >= 3 and fields[1].startswith("/"):
            mounts.append(Mount(_unescape(fields[1]), fields[2], _unescape(fields[0])))
    return tuple(mounts)


def mount_of(path: str | Path, mounts: Sequence[Mount]) -> Mount | None:
    """The mount holding ``path`` (already resolved: see ``resolve``), or None when no mount point covers it."""
    text = str(path)
    best: Mount | None = None
    best_length = -1
    for mount in mounts:
        point = mount.mount_point.rstrip("/") or "/"
        covers = point == "/" or text == point or text.startswith(point + "/")
        if covers and len(point) >= best_length:
            best, best_length = mount, len(point)
    return best


def resolve(path: str | Path) -> str:
    """``path`` absolute, with the links of its existing part resolved (a directory not created yet is
    judged by where it would be created)."""
    return os.path.realpath(os.path.expanduser(str(path)))


def read_mount_table() -> tuple[str, str] | None:
    """(the table's path, its text) of this process, or None when no table can be read."""
    for name in MOUNT_TABLES:
        try:
            return name, Path(name).read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
    return None


def filesystem_of(path: str | Path, *, table: str | None = None) -> Mount | None:
    """The mount holding ``path``, from ``table`` (a mount table's text; default: this process's)."""
    if table is None:
        read = read_mount_table()
        if read is None:
            return None
        table = read[1]
    return mount_of(resolve(path), parse(table))


def local_bases(bases: Sequence[str | Path], *, table: str) -> tuple[Path, ...]:
    """Those of ``bases`` (directories that exist) that are not on a network file system, in order."""
    mounts = parse(table)
    local = []
    for base in dict.fromkeys(str(b) for b in bases):
        mount = mount_of(resolve(base), mounts)
        if (mount is None or not mount.network) and os.path.isdir(base):
            local.append(Path(base))
    return tuple(local)


def triton_cache_dir(env: Mapping[str, str]) -> Path:
    """Triton's cache dir as Triton resolves it: TRITON_CACHE_DIR, else ``$TRITON_HOME/.triton/cache``
    (TRITON_HOME defaults to the home directory)."""
    if env.get("TRITON_CACHE_DIR"):
        return Path(env["TRITON_CACHE_DIR"]).expanduser()
    home = env.get("TRITON_HOME") or env.get("HOME") or os.path.expanduser("~")
    return Path(home) / ".triton" / "cache"


def probe(paths: Mapping[str, str | Path], *, table: tuple[str, str] | None = None) -> FilesystemFacts:
    """The file system of each of ``paths`` (role -> path). ``table``: (name, text) of the mount table to use
    (default: this process's)."""
    read = table if table is not None else read_mount_table()
    if read is None:
        found = tuple(PathFilesystem(role, str(p), resolve(p), None) for role, p in paths.items())
        return FilesystemFacts(found, None, f"no mount table readable ({', '.join(MOUNT_TABLES)})")
    mounts = parse(read[1])
    entries = []
    for role, path in paths.items():
        resolved = resolve(path)
        entries.append(PathFilesystem(role, str(path), resolved, mount_of(resolved, mounts)))
    bases = local_bases((tempfile.gettempdir(), *LOCK_BASES), table=read[1])
    return FilesystemFacts(tuple(entries), read[0], lock_base=str(bases[0]) if bases else None)


def _unescape(field: str) -> str:
    """The kernel writes space, tab, newline and backslash in mount table fields as ``\\040`` and alike."""
    return _ESCAPE.sub(lambda m: chr(int(m.group(1), 8)), field)
