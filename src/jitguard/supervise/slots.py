"""Host-wide compile slots: N flock'ed files in a shared directory, one per compile job allowed to run.

Every compile command of a supervised build runs under the launcher (``jitguard.supervise.launcher``), which takes
one free slot ``slot-000`` ... ``slot-{N-1}`` before the compiler starts and keeps it until the compiler and
all its children are gone. Because every process on the host uses the same directory, 8 ranks or 8 engines
building at once run at most N compile jobs together, not 8 x N.

N is what the memory budget allows (``build.budget.plan_jobs``). Processes that computed different N share the
low-numbered slots, so the host total never exceeds the largest N in use. flock locks belong to open file
descriptions: they vanish when the last process holding one dies, so a killed build never leaks a slot, and
the file descriptor is inherited by the compiler so the slot stays taken exactly as long as the compile runs.

The directory is keyed by host name, because a cache directory on a network file system is shared by hosts
whose memory is not shared. It lives in jitguard's cache dir, or in the private temporary fallback when the
cache dir is refused or full (``jitguard.fileio.state_dir``). A slot file is never opened through a link: a
link found at a slot's name is replaced by a plain file, so a dangling one cannot make jitguard create its
target.

stdlib and jitguard.fileio only: the launcher imports this module once per compile command.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import socket
import time
from dataclasses import dataclass
from pathlib import Path

from jitguard.fileio import PRIVATE_DIR_MODE, safe_name, state_dir

SLOT_PREFIX = "slot-"
_POLL_START = 0.02
_POLL_MAX = 0.5


def host_slots_dir(cache_dir: Path) -> Path:
    """The default slots directory of this host: ``<cache_dir>/slots/<hostname>`` (or the same under the
    private temporary fallback)."""
    host = safe_name(socket.gethostname() or "localhost")
    try:
        return state_dir(cache_dir, "slots") / host
    except OSError:
        return Path(cache_dir) / "slots" / host  # taking a slot then fails, and says why


def slot_path(directory: Path, index: int) -> Path:
    return Path(directory) / f"{SLOT_PREFIX}{index:03d}"


@dataclass(frozen=True)
class Slot:
    """A held slot: closing ``fd`` (in every process that inherited it) releases it."""

    index: int
    fd: int

    def release(self) -> None:
        with contextlib.suppress(OSError):
            os.close(self.fd)


def _open(path: Path) -> int:
    # Read-only is enough for flock, so processes of other users can share a world-readable directory.
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        return os.open(path, flags | os.O_CREAT, 0o644)
    except PermissionError:
        return os.open(path, flags)
    except OSError as exc:
        if exc.errno != errno.ELOOP:
            raise
    os.unlink(path)  # a link at a slot's name (dangling or not): replace it, never follow it
    return os.open(path, flags | os.O_CREAT | os.O_EXCL, 0o644)


def try_acquire(directory: Path, count: int) -> Slot | None:
    """Take the lowest free slot of ``count``, or return None when all are held."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True, mode=PRIVATE_DIR_MODE)
    for index in range(max(1, count)):
        fd = _open(slot_path(directory, index))
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue
        except BaseException:
            os.close(fd)
            raise
        return Slot(index, fd)
    return None


def acquire(directory: Path, count: int, *, timeout: float | None = None) -> Slot | None:
    """Wait until one of ``count`` slots is free and take it. Returns None only when ``timeout`` expires.

    Polls with a short, growing interval: waiting is cheap (one flock attempt per slot), and a freed slot is
    taken within half a second.
    """
    deadline = None if timeout is None else time.monotonic() + timeout
    delay = _POLL_START
    while True:
        slot = try_acquire(directory, count)
        if slot is not None:
            return slot
        if deadline is not None and time.monotonic() >= deadline:
            return None
        time.sleep(delay)
        delay = min(_POLL_MAX, delay * 1.5)


def holders(directory: Path, *, proc_locks: Path = Path("/proc/locks")) -> dict[int, int]:
    """slot index -> pid of the process that took it, read from /proc/locks (held slots only).

    The pid is the launcher's, which is the pid of the process that called flock; it may be 0 when the holder
    lives in another pid namespace.
    """
    directory = Path(directory)
    by_inode: dict[tuple[int, int, int], int] = {}
    try:
        entries = list(directory.glob(f"{SLOT_PREFIX}*"))
    except OSError:
        return {}
    for path in entries:
        try:
            st = path.stat()
            index = int(path.name[len(SLOT_PREFIX) :])
        except (OSError, ValueError):
            continue
        by_inode[(os.major(st.st_dev), os.minor(st.st_dev), st.st_ino)] = index
    if not by_inode:
        return {}
    try:
        text = proc_locks.read_text()
    except OSError:
        return {}
    found: dict[int, int] = {}
    for line in text.splitlines():
        fields = line.split()
        # "1: FLOCK  ADVISORY  WRITE 1234 fd:01:5678 0 EOF"; waiters are marked "1: -> FLOCK ..." and skipped.
        if len(fields) < 6 or fields[1] != "FLOCK":
            continue
        dev_ino = fields[5].split(":")
        if len(dev_ino) != 3:
            continue
        try:
            key = (int(dev_ino[0], 16), int(dev_ino[1], 16), int(dev_ino[2]))
            pid = int(fields[4])
        except ValueError:
            continue
        if key in by_inode:
            found[by_inode[key]] = pid
    return found
