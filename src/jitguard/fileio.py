"""The one place jitguard checks files: trust policies, the no-follow walk, the single open of a regular
file, streaming SHA-256, digest and name validation, landing a new file, and jitguard's own state on top.

The cache dir is trusted the way ssh trusts ``~/.ssh`` and pip its cache: jitguard creates it 0700, and a
directory or file in it that another user owns, or that users other than us can write (``untrusted_reasons``),
is never read: a record planted there must not decide a verdict or a build. In detail:

- reads (``read_bytes``, ``read_json``) walk from the cache dir down with directory file descriptors, open
  every level without following a link (``O_NOFOLLOW``) and check it; only a regular file of ours is read, up
  to a size cap, and JSON of any depth parses or is a miss. Any problem is a miss (None), never an exception;
- writes (``write_atomic``, ``write_json``) create a new private file (0600, ``O_EXCL``) in the same directory
  and rename it over the target: a link planted at the target is replaced, never followed. JSON is redacted
  (``jitguard.redaction``) on its way to disk;
- a build log (``open_log``) is opened without following a link, kept 0600 and redacted line by line; a full
  disk ends the log, never the build;
- ``state_dir`` says where logs and slots live: in the cache dir when it is trusted and takes a file, else in
  a private temporary directory (``fallback_root``), the fallback ``jitguard doctor`` names.

The fleet reads other tools' caches with the same primitives under a named ``Policy`` (``PUBLISHED``: what a
host may publish; ``LOADED``: a directory an engine loads from): ``trusted_root`` (a cache root, links
resolved, each owned by us or root), ``walk_files`` (descriptors grow with depth, not file count) and
``read_checked`` (one open, checked on the descriptor, hashed as read; a file that changes meanwhile is refused).
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import logging
import math
import os
import re
import secrets
import shutil
import stat
import tempfile
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, BinaryIO, Protocol, TypeGuard

from jitguard.redaction import redact_bytes, redact_tree

PRIVATE_DIR_MODE = 0o700
PRIVATE_FILE_MODE = 0o600
MAX_READ_BYTES = 4 * 1024 * 1024  # the largest record jitguard writes is a few KiB
_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
# O_NONBLOCK: a FIFO planted where a file should be must not hang the reader.
_READ = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_NEW = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]")
CHUNK = 4 * 1024**2
SHA256_HEX = re.compile(r"[0-9a-f]{64}")
# One path component a store document or a snapshot may name: no leading '-', no '..', no newline (fullmatch).
_NAME_PART = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.,+=@~-]{0,254}|\.[A-Za-z0-9_][A-Za-z0-9_.,+=@~-]{0,253}")
MAX_WALK_DEPTH = 64

log = logging.getLogger("jitguard.state")


class UntrustedPath(PermissionError):
    """A directory or file jitguard does not trust with its state; ``reasons`` says why."""

    def __init__(self, path: str | Path, reasons: Sequence[str]) -> None:
        self.reasons = tuple(reasons)
        super().__init__(errno.EPERM, f"not trusted ({'; '.join(self.reasons)})", str(path))


def others_can_write(
    mode: int,
    uid: int,
    gid: int,
    *,
    euid: int | None = None,
    egid: int | None = None,
    sticky_protects: bool = True,
    root_is_trusted: bool = True,
) -> tuple[str, ...]:
    """Why users other than us can write (or replace) a directory with this mode and ownership.

    A group-writable directory whose group is our own primary group (the usual "user private group" setup) is
    not reported. With ``sticky_protects`` (a directory FlashInfer loads from) the sticky bit, as on /tmp, makes
    a world- or group-writable directory safe enough, and root as owner is not "another user"; jitguard's own
    state is judged without those allowances (``untrusted_reasons``).
    """
    euid = os.geteuid() if euid is None else euid
    egid = os.getegid() if egid is None else egid
    reasons = []
    sticky = sticky_protects and bool(mode & stat.S_ISVTX)
    bits = ", no sticky bit" if sticky_protects else ""
    if mode & stat.S_IWOTH and not sticky:
        reasons.append(f"writable by every user (o+w{bits})")
    if mode & stat.S_IWGRP and not sticky and gid != egid:
        reasons.append(f"writable by group {gid} (g+w{bits})")
    if uid != euid and not (root_is_trusted and uid == 0):
        reasons.append(f"owned by another user (uid {uid})")
    return tuple(reasons)


def untrusted_reasons(st: os.stat_result) -> tuple[str, ...]:
    """Why jitguard would not trust this directory or file with its state (empty: it would)."""
    return OWN_STATE.reasons(st)


@dataclass(frozen=True)
class Policy:
    """A named trust rule for a directory or file: who may own it, whether a sticky bit makes a directory
    others can write safe enough (``others_can_write``), and with ``private`` whether others may read it."""

    name: str
    sticky_protects: bool
    root_is_trusted: bool
    private: bool = False

    def reasons(self, st: os.stat_result) -> tuple[str, ...]:
        found = others_can_write(
            st.st_mode,
            st.st_uid,
            st.st_gid,
            sticky_protects=self.sticky_protects,
            root_is_trusted=self.root_is_trusted,
        )
        if self.private and st.st_mode & 0o077:
            found += (f"readable by others (mode {stat.S_IMODE(st.st_mode):04o})",)
        return found

    def owner_reason(self, st: os.stat_result) -> str | None:
        """Why the owner alone is refused (another user), None when the owner is fine."""
        if st.st_uid == os.geteuid() or (self.root_is_trusted and st.st_uid == 0):
            return None
        return f"owned by another user (uid {st.st_uid})"


OWN_STATE = Policy("jitguard's own state", sticky_protects=False, root_is_trusted=False)
# What a host publishes to the store: ours (or root's), and no one else can write it (ssh's ~/.ssh rule).
PUBLISHED = Policy("a cache this host publishes", sticky_protects=False, root_is_trusted=True)
# The directories above a cache root, or a directory an engine loads from: a sticky /tmp is safe enough.
LOADED = Policy("a directory an engine loads from", sticky_protects=True, root_is_trusted=True)
# A private key (ssh's rule for an identity file): this user's alone, readable by no one else.
PRIVATE_KEY = Policy("a private key", sticky_protects=False, root_is_trusted=False, private=True)


def open_nofollow(
    path: str | Path, flags: int, mode: int = PRIVATE_FILE_MODE, *, dir_fd: int | None = None
) -> int:
    """``os.open`` that never follows a link at ``path`` itself (ELOOP) and is not inherited by children."""
    return os.open(path, flags | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=dir_fd)


def open_regular(path: str | Path) -> BinaryIO:
    """``path`` opened for reading as a regular file, never through a link and never blocking on a FIFO;
    FileNotFoundError for anything else (missing, a link, a pipe, a device): for places jitguard reads but
    does not own, such as a ``file://`` store."""
    try:
        fd = os.open(path, _READ)
    except OSError as exc:
        if exc.errno in (errno.ENOENT, errno.ELOOP):
            raise FileNotFoundError(str(path)) from None
        raise
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise FileNotFoundError(str(path))
    os.set_blocking(fd, True)
    return os.fdopen(fd, "rb")


def is_regular(path: str | Path, *, own: bool = False) -> bool:
    """``path`` itself (not a link's target) is a regular file, with ``own`` one of this user's."""
    try:
        st = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISREG(st.st_mode) and (not own or st.st_uid == os.geteuid())


def owner_and_mode(st: os.stat_result) -> tuple[int, str]:
    """Who owns what ``st`` describes, and its permission bits as ``0755``: for reports."""
    return st.st_uid, f"{stat.S_IMODE(st.st_mode):04o}"


def foreign_owner(path: Path) -> tuple[Path, int] | None:
    """The nearest existing of ``path`` and its parents, with its owner, when another user owns it."""
    for candidate in (path, *path.parents):
        try:
            uid = candidate.stat().st_uid
        except OSError:
            continue
        return (candidate, uid) if uid != os.geteuid() else None
    return None


def is_sha256(text: object) -> TypeGuard[str]:
    """``text`` is a lower-case hex SHA-256 digest."""
    return isinstance(text, str) and SHA256_HEX.fullmatch(text) is not None


def is_plain_name(name: object) -> TypeGuard[str]:
    """One plain path component: letters, digits and ``_.,+=@~-``, no '..', no leading '-', no newline."""
    return isinstance(name, str) and _NAME_PART.fullmatch(name) is not None and name not in (".", "..")


def is_safe_relative(path: object) -> TypeGuard[str]:
    """A '/'-separated relative path of plain names (``is_plain_name``): never absolute, never climbing out."""
    if not isinstance(path, str) or not path or len(path) > 4096:
        return False
    return all(is_plain_name(part) for part in path.split("/"))


def is_time(value: object) -> TypeGuard[int | float]:
    """A time a manifest may give: a finite number of seconds since the epoch within this millennium (a
    400-digit integer would overflow ``float``)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    if isinstance(value, int) and abs(value) > 10**12:
        return False
    return math.isfinite(value) and 0 <= value < 32503680000


def sha256_stream(source: BinaryIO | int) -> tuple[str, int]:
    """The SHA-256 and length of what ``source`` (a binary file or a descriptor) holds from here to its end."""
    digest = hashlib.sha256()
    size = 0
    while True:
        chunk = os.read(source, CHUNK) if isinstance(source, int) else source.read(CHUNK)
        if not chunk:
            return digest.hexdigest(), size
        digest.update(chunk)
        size += len(chunk)


def sha256_regular(path: Path, *, limit: int | None = None) -> str | None:
    """The SHA-256 of the regular file at ``path`` opened without following a link (None: not one, missing,
    or larger than ``limit``). For places jitguard does not own, such as a ``file://`` store's blobs."""
    try:
        fd = os.open(path, _READ)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or (limit is not None and st.st_size > limit):
            return None
        return sha256_stream(fd)[0]
    finally:
        os.close(fd)


# -- reading other tools' caches ---------------------------------------------------------------------------


def trusted_root(path: Path, policy: Policy, *, ancestors: Policy = LOADED) -> tuple[Path, tuple[str, ...]]:
    """``path`` with its links resolved, and why it is not to be trusted under ``policy`` (empty: it is). Every
    link on the way must be owned by us or root (a link another user planted at ``/tmp/torchinductor_<me>``
    is refused), every directory above the root must pass ``ancestors`` (a sticky /tmp does), and the root
    itself ``policy``. A root that is not there yet has no reasons (there is nothing in it to trust)."""
    euid = os.geteuid()
    parts = list(Path(os.path.abspath(os.path.expanduser(str(path)))).parts[1:])
    current = Path("/")
    hops = 0
    while parts:
        part = parts.pop(0)
        candidate = current / part
        try:
            st = os.lstat(candidate)
        except FileNotFoundError:
            return Path(current, part, *parts), ()
        except OSError as exc:
            return candidate, (f"cannot be read ({exc.strerror or exc})",)
        if stat.S_ISLNK(st.st_mode):
            if st.st_uid not in (euid, 0):
                return candidate, (f"{candidate} is a link owned by another user (uid {st.st_uid})",)
            hops += 1
            if hops > 40:
                return candidate, ("too many levels of links",)
            target = Path(os.readlink(candidate))
            if target.is_absolute():
                current = Path("/")
                parts = list(target.parts[1:]) + parts
            else:
                parts = list(target.parts) + parts
            continue
        if part == "..":
            current = current.parent
            continue
        rule = policy if not parts else ancestors
        if not parts and not stat.S_ISDIR(st.st_mode):
            return candidate, ("not a directory",)
        reasons = rule.reasons(st)
        if reasons:
            where = "" if not parts else f"{candidate}: "
            return Path(candidate, *parts), tuple(where + r for r in reasons)
        current = candidate
    return current, ()


@dataclass(frozen=True)
class TreeFile:
    """A non-directory entry found by ``walk_files``: its path below the root, its name and ``lstat``, and
    the descriptor of its directory (valid only until the walk moves on)."""

    relative: str
    name: str
    dir_fd: int
    st: os.stat_result


def walk_files(
    root_fd: int,
    policy: Policy | None,
    skip: Callable[[str, str], None],
    *,
    prune: Callable[[str, list[str]], str | None] | None = None,
) -> Iterator[TreeFile]:
    """Every entry below the directory ``root_fd`` that is not a directory, in name order, without following a
    link: a link is skipped (``skip(why, relative)``), so is a directory ``policy`` refuses, one deeper than
    MAX_WALK_DEPTH, one with an unusual name, or one ``prune(relative, names)`` gives a reason for. One
    descriptor per level: a tree of any width walks under a small ``ulimit -n``."""

    def visit(fd: int, relative: str, depth: int) -> Iterator[TreeFile]:
        try:
            names = sorted(os.listdir(fd))
        except OSError:
            skip("unreadable directory", relative)
            return
        if relative and prune is not None:
            why = prune(relative, names)
            if why:
                skip(why, relative)
                return
        for name in names:
            child_relative = f"{relative}/{name}" if relative else name
            try:
                st = os.stat(name, dir_fd=fd, follow_symlinks=False)
            except FileNotFoundError:
                continue
            except OSError:
                skip("unreadable", child_relative)
                continue
            if stat.S_ISLNK(st.st_mode):
                skip("link", child_relative)
            elif not is_safe_relative(child_relative):
                skip("unusual name", child_relative)
            elif not stat.S_ISDIR(st.st_mode):
                yield TreeFile(child_relative, name, fd, st)
            elif depth >= MAX_WALK_DEPTH:
                skip("too deep", child_relative)
            else:
                try:
                    child = os.open(name, _DIR | os.O_NOFOLLOW, dir_fd=fd)
                except OSError:
                    skip("unreadable directory", child_relative)
                    continue
                try:
                    reasons = policy.reasons(os.fstat(child)) if policy is not None else ()
                    if reasons:
                        skip(f"in a directory {reasons[0]}", child_relative)
                        continue
                    yield from visit(child, child_relative, depth + 1)
                finally:
                    os.close(child)

    yield from visit(root_fd, "", 0)


class Sink(Protocol):
    """Where ``read_checked`` copies the bytes it reads (a file, a spool, a hash-only sink)."""

    def write(self, data: bytes, /) -> object: ...


class FileRefused(OSError):
    """A file ``read_checked`` would not read, with why (``reason``: a short phrase for a report)."""

    def __init__(self, reason: str, path: str) -> None:
        self.reason = reason
        super().__init__(errno.EPERM, reason, path)


@dataclass(frozen=True)
class CheckedFile:
    """What ``read_checked`` read: the permission bits, size and SHA-256 of exactly the bytes it copied."""

    mode: int
    size: int
    sha256: str


def read_checked(
    dir_fd: int, name: str, policy: Policy | None, out: Sink, *, limit: int, label: str = ""
) -> CheckedFile:
    """Open ``name`` in ``dir_fd`` once (no link followed, never blocking on a FIFO or device), check that
    descriptor (a regular file, ``policy``, at most ``limit`` bytes), and copy it to ``out`` while hashing: what
    the caller then uses is exactly what was checked. A file that changes while it is read (size, mtime or
    ctime) is refused. Raises FileRefused or OSError."""
    where = label or name
    try:
        fd = os.open(name, _READ, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise FileRefused("link", where) from None
        raise
    try:
        before = os.fstat(fd)
        if not stat.S_ISREG(before.st_mode):
            raise FileRefused("not a regular file", where)
        reasons = policy.reasons(before) if policy is not None else ()
        if reasons:
            raise FileRefused(reasons[0], where)
        if before.st_size > limit:
            raise FileRefused("too large", where)
        digest = hashlib.sha256()
        size = 0
        while chunk := os.read(fd, CHUNK):
            size += len(chunk)
            if size > limit:
                raise FileRefused("too large", where)
            digest.update(chunk)
            out.write(chunk)
        after = os.fstat(fd)
    finally:
        os.close(fd)
    if size != before.st_size or (after.st_size, after.st_mtime_ns, after.st_ctime_ns) != (
        before.st_size,
        before.st_mtime_ns,
        before.st_ctime_ns,
    ):
        raise FileRefused("changed while it was read", where)
    return CheckedFile(stat.S_IMODE(before.st_mode), size, digest.hexdigest())


def open_dir(path: Path) -> int:
    """A descriptor of the directory ``path`` (the caller closes it). Raises OSError."""
    return os.open(path, _DIR)


def open_subdir(dir_fd: int, name: str, *, create: bool, mode: int = PRIVATE_DIR_MODE) -> int:
    """A descriptor of ``name`` in ``dir_fd``, created ``mode`` first where missing with ``create``; never
    through a link (ELOOP or ENOTDIR). Raises OSError."""
    if create:
        with contextlib.suppress(FileExistsError):
            os.mkdir(name, mode, dir_fd=dir_fd)
    return os.open(name, _DIR | os.O_NOFOLLOW, dir_fd=dir_fd)


def open_tree_dir(
    root: Path,
    parts: Sequence[str],
    policy: Policy,
    *,
    create: bool,
    check_root: bool = True,
    mode: int = PRIVATE_DIR_MODE,
) -> int:
    """A descriptor of ``root/parts...`` (the caller closes it): every level below ``root`` opened without
    following a link (created ``mode`` where missing with ``create``) and checked against ``policy`` on its
    descriptor; ``root`` itself, which may be reached through a link (the user's choice, e.g. ~/.cache on
    another disk), is checked too with ``check_root``. Raises FileNotFoundError, ``UntrustedPath``, or OSError
    (ELOOP or ENOTDIR: a link or a file in the way)."""
    if create:
        os.makedirs(root, mode=mode, exist_ok=True)
    fd = os.open(root, _DIR)
    current = root
    try:
        if check_root:
            _check(fd, current, policy)
        for part in parts:
            current = current / part
            child = open_subdir(fd, part, create=create, mode=mode)
            os.close(fd)
            fd = child
            _check(fd, current, policy)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _check(fd: int, path: Path, policy: Policy) -> None:
    reasons = policy.reasons(os.fstat(fd))
    if reasons:
        raise UntrustedPath(path, reasons)


def new_temp(dir_fd: int, name: str, suffix: str) -> tuple[str, int]:
    """A new private (0600) file beside ``name`` in ``dir_fd``, named ``.<name>.<pid>-<random><suffix>`` so a
    later sweep can tell one whose writer died (``sweep_dead_temps``): (its name, a write descriptor)."""
    temp = f".{name[:60]}.{os.getpid()}-{secrets.token_hex(4)}{suffix}"
    return temp, os.open(temp, _NEW, PRIVATE_FILE_MODE, dir_fd=dir_fd)


_TEMP_OWNER = re.compile(r"\.(\d+)-[0-9a-f]{8}\.[a-z]+")


def sweep_dead_temps(dir_fd: int, suffix: str) -> int:
    """Remove the ``new_temp`` files with ``suffix`` in ``dir_fd`` whose writing process is gone (a restore
    killed or timed out): how many went."""
    removed = 0
    try:
        names = os.listdir(dir_fd)
    except OSError:
        return 0
    for name in names:
        match = _TEMP_OWNER.search(name)
        if not name.endswith(suffix) or match is None or not name.endswith(match.group(0)):
            continue
        if _alive(int(match.group(1))):
            continue
        with contextlib.suppress(OSError):
            os.unlink(name, dir_fd=dir_fd)
            removed += 1
    return removed


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True  # another user's process: alive
    return True


def safe_name(text: str, *, limit: int = 80) -> str:
    """A file-name-safe form of ``text``; a hash suffix keeps distinct names distinct after substitution."""
    cleaned = _UNSAFE.sub("_", text)[:limit]
    if cleaned != text:
        cleaned += "-" + hashlib.sha256(text.encode()).hexdigest()[:8]
    return cleaned


# -- reading -----------------------------------------------------------------------------------------------


def read_bytes(path: Path, *, root: Path | None = None, limit: int = MAX_READ_BYTES) -> bytes:
    """The bytes of ``path``, a regular file of ours that others cannot write, opened without following a
    link, at most ``limit`` of them. With ``root`` every directory from ``root`` down to the file must be
    trusted too. Raises OSError."""
    path = Path(path)
    with _parent_fd(path, root, create=False) as dir_fd:
        fd = os.open(path.name, _READ, dir_fd=dir_fd)
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise OSError(errno.EINVAL, "not a regular file", str(path))
            reasons = untrusted_reasons(st)
            if reasons:
                raise UntrustedPath(path, reasons)
            if st.st_size > limit:
                raise OSError(errno.EFBIG, f"larger than {limit} bytes", str(path))
            chunks = []
            left = limit + 1
            while left > 0:
                chunk = os.read(fd, min(left, 1 << 20))
                if not chunk:
                    break
                chunks.append(chunk)
                left -= len(chunk)
        finally:
            os.close(fd)
    data = b"".join(chunks)
    if len(data) > limit:
        raise OSError(errno.EFBIG, f"larger than {limit} bytes", str(path))
    return data


def read_json(path: Path, *, root: Path | None = None) -> dict[str, Any] | None:
    """The JSON object in ``path`` (see ``read_bytes``), or None: missing, untrusted, unreadable, too large,
    too deep, not JSON or not an object. Every file jitguard keeps is a cache, and a miss is always safe."""
    try:
        data = json.loads(read_bytes(path, root=root))
    except (OSError, ValueError, RecursionError):
        return None
    return data if isinstance(data, dict) else None


# -- writing -----------------------------------------------------------------------------------------------


def write_atomic(path: Path, data: bytes, *, root: Path | None = None) -> None:
    """Replace ``path`` with a private (0600) file holding ``data``; readers never see half of it, and a link
    at ``path`` is replaced, not followed. Missing directories are created 0700 (every one from ``root`` down
    checked, as for reading). Raises OSError (``UntrustedPath`` for a directory jitguard does not trust)."""
    path = Path(path)
    with _parent_fd(path, root, create=True) as dir_fd, _private_temp(dir_fd, path.name, data) as temp:
        os.replace(temp, path.name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)


def write_new(path: Path, data: bytes, *, root: Path | None = None) -> bool:
    """Create ``path`` holding ``data`` unless something is there already (then False, and it stays as it
    was): written in full to a private temporary file first and linked into place, so readers see all of it or
    nothing, and of two concurrent writers exactly one wins. Raises OSError as ``write_atomic`` does."""
    path = Path(path)
    with _parent_fd(path, root, create=True) as dir_fd, _private_temp(dir_fd, path.name, data) as temp:
        try:
            os.link(temp, path.name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd, follow_symlinks=False)
        except FileExistsError:
            return False
        return True


@contextlib.contextmanager
def _private_temp(dir_fd: int, name: str, data: bytes) -> Iterator[str]:
    """A new private (0600) file beside ``name`` holding ``data``, gone after the block unless it was renamed
    into place (a replace moves it; a link leaves a second name, which this removes)."""
    temp = f".{name}.{secrets.token_hex(6)}.tmp"
    fd = os.open(temp, _NEW, PRIVATE_FILE_MODE, dir_fd=dir_fd)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        yield temp
    finally:
        with contextlib.suppress(OSError):
            os.unlink(temp, dir_fd=dir_fd)


def write_json(path: Path, data: dict[str, Any], *, root: Path | None = None) -> None:
    """``data`` as JSON, secrets redacted, written with ``write_atomic`` (concurrent writers: last one wins)."""
    write_atomic(path, json_bytes(data), root=root)


def json_bytes(data: dict[str, Any]) -> bytes:
    """``data`` as the JSON text jitguard writes: secrets redacted, keys sorted."""
    return (json.dumps(redact_tree(data, names=False), indent=1, sort_keys=True) + "\n").encode()


def remove(path: Path) -> bool:
    """Remove whatever is at ``path`` (a file, a link, a whole directory) without following a link. False
    when nothing was there; raises OSError when it cannot go (a read-only file system)."""
    try:
        if stat.S_ISDIR(os.lstat(path).st_mode):
            shutil.rmtree(path)
        else:
            os.unlink(path)
    except FileNotFoundError:
        return False
    return True


def remove_each(paths: Iterable[Path]) -> tuple[int, list[tuple[str, str]]]:
    """``remove`` every path: how many went, and (path, reason) for each that could not."""
    removed = 0
    stayed: list[tuple[str, str]] = []
    for path in paths:
        try:
            removed += remove(path)
        except OSError as exc:
            stayed.append((str(path), exc.strerror or str(exc)))
    return removed, stayed


def json_files(directory: Path) -> list[Path]:
    """Every ``*.json`` entry of ``directory`` but hidden (temporary) ones, sorted, whatever its type (so a
    directory or link in the way can be cleared); none when the directory is missing or unreadable."""
    try:
        found = Path(directory).iterdir()
        return sorted(p for p in found if p.suffix == ".json" and not p.name.startswith("."))
    except OSError:
        return []


# -- where state lives --------------------------------------------------------------------------------------


def fallback_path(base: Path | None = None) -> Path:
    """The private temporary directory logs and slots fall back to: ``$TMPDIR/jitguard-<uid>`` (or the same
    name in ``base``)."""
    return Path(base or tempfile.gettempdir()) / f"jitguard-{os.geteuid()}"


def fallback_root(base: Path | None = None) -> Path:
    """``fallback_path(base)``, created 0700; a fresh private ``mkdtemp`` directory when that name is taken by
    a link, a file or a directory that is not ours alone."""
    path = fallback_path(base)
    with contextlib.suppress(FileExistsError):
        os.mkdir(path, PRIVATE_DIR_MODE)
    st = os.lstat(path)
    if stat.S_ISDIR(st.st_mode) and not stat.S_ISLNK(st.st_mode) and not untrusted_reasons(st):
        return path
    return Path(tempfile.mkdtemp(prefix=f"{path.name}-", dir=path.parent))


def state_dir(cache_dir: Path, name: str) -> Path:
    """``<cache_dir>/<name>`` when the cache dir is trusted and can take a file now, else
    ``<fallback_root()>/<name>``. Raises OSError only when neither can."""
    try:
        return private_dir(Path(cache_dir), name)
    except OSError as exc:
        log.info("jitguard: %s cannot take %s (%s); using %s", cache_dir, name, exc, fallback_path())
    return private_dir(fallback_root(), name)


def private_dir(root: Path, name: str) -> Path:
    """``<root>/<name>``, created 0700 where missing, every level trusted (``untrusted_reasons``) and able to
    take a file now; raises OSError (``UntrustedPath`` for a level not ours alone) otherwise."""
    with _dir_fd(root, (name,), create=True) as dir_fd:
        probe = f".probe-{secrets.token_hex(6)}"
        fd = os.open(probe, _NEW, PRIVATE_FILE_MODE, dir_fd=dir_fd)
        try:
            os.write(fd, b"x")  # a full disk still creates empty files (inodes); a byte needs a block
        finally:
            os.close(fd)
            os.unlink(probe, dir_fd=dir_fd)
    return root / name


# -- build logs ---------------------------------------------------------------------------------------------


class LogFile:
    """A build log: private (0600), append-only, every write redacted. Writing never raises: the first
    failure (a full disk) is kept in ``error``, said once through logging, and the rest is dropped."""

    def __init__(self, path: Path, fd: int) -> None:
        self.path = path
        self.name = str(path)
        self.error: OSError | None = None
        self._handle = os.fdopen(fd, "ab", buffering=0)

    def write(self, data: bytes) -> int:
        if self.error is None:
            try:
                self._handle.write(redact_bytes(data))
            except OSError as exc:
                self.error = exc
                logging.getLogger("jitguard").warning(
                    "jitguard: the build log %s stops here: %s; the build goes on",
                    self.name,
                    exc.strerror or exc,
                )
        return len(data)

    def flush(self) -> None:
        """Every write goes straight to the file (unbuffered); kept for the file interface."""

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._handle.close()

    def __enter__(self) -> LogFile:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


def open_log(path: Path) -> LogFile:
    """Open (or create) the log ``path`` for appending without following a link; it must be a regular file
    of ours, and is made 0600. Missing directories are created 0700. Raises OSError."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True, mode=PRIVATE_DIR_MODE)
    flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        fd = os.open(path, flags, PRIVATE_FILE_MODE)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise OSError(
                errno.ELOOP, "it is a symbolic link (jitguard never writes through one)", str(path)
            ) from None
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise OSError(errno.EINVAL, "it is not a regular file", str(path))
        if st.st_uid != os.geteuid():
            raise UntrustedPath(path, [f"owned by another user (uid {st.st_uid})"])
        if stat.S_IMODE(st.st_mode) != PRIVATE_FILE_MODE:
            os.fchmod(fd, PRIVATE_FILE_MODE)
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return LogFile(path, fd)


# -- directory descriptors ----------------------------------------------------------------------------------


@contextlib.contextmanager
def _parent_fd(path: Path, root: Path | None, *, create: bool) -> Iterator[int]:
    """A descriptor of the directory holding ``path``: walked and checked from ``root`` when given, else the
    parent as it is (a directory jitguard does not own, such as FlashInfer's workspace)."""
    if root is None:
        if create:
            path.parent.mkdir(parents=True, exist_ok=True, mode=PRIVATE_DIR_MODE)
        fd = os.open(path.parent, _DIR)
        try:
            yield fd
        finally:
            os.close(fd)
        return
    parts = path.relative_to(root).parts[:-1]
    with _dir_fd(Path(root), parts, create=create) as fd:
        yield fd


@contextlib.contextmanager
def _dir_fd(root: Path, parts: Sequence[str], *, create: bool) -> Iterator[int]:
    """``open_tree_dir`` under jitguard's own rule (``OWN_STATE``, ``root`` checked too), closed after."""
    fd = open_tree_dir(root, parts, OWN_STATE, create=create)
    try:
        yield fd
    finally:
        os.close(fd)
