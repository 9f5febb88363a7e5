"""Host-wide compile slots: N flock'ed files in a shared directory, one per compile job allowed to run.

Every compile holds one (``supervise.launcher``) until it and its children are gone, so 8 ranks building at
once run N jobs together, not 8 x N; a killed build never leaks one (flock dies with its last holder), and
``holders_of`` / ``reclaim`` name and end compiles whose build is gone. The directory is per host, on local
disk (``locks.lock_dir``). stdlib and fileio only at import: the launcher imports this once per compile.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import signal
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from jitguard import fileio
from jitguard.fileio import PRIVATE_DIR_MODE, safe_name
from jitguard.locks.lock_dir import lock_dir
from jitguard.supervise.keeper import start_time

SLOT_PREFIX = "slot-"
OWNER_ENV = "JITGUARD_BUILD_OWNER"  # "<pid>:<start ticks>" of the jitguard process whose build this is
MODULE_ENV = "JITGUARD_BUILD_MODULE"
_POLL_START = 0.02
_POLL_MAX = 0.5
_RECLAIM_EVERY_S = 1.0


def host_slots_dir(cache_dir: Path, *, mount_table: str | None = None) -> Path:
    """The default slots directory of this host: ``<cache_dir>/slots/<hostname>``, or the same under the
    private temporary fallback, or under a local directory when the cache dir is on a network file system
    (``jitguard.locks.lock_dir``; ``mount_table``: the mount table's text, default this process's)."""
    host = safe_name(socket.gethostname() or "localhost")
    try:
        return lock_dir(cache_dir, "slots", table=mount_table) / host
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
    try:
        return fileio.open_nofollow(path, os.O_RDONLY | os.O_CREAT, 0o644)
    except PermissionError:
        return fileio.open_nofollow(path, os.O_RDONLY)
    except OSError as exc:
        if exc.errno != errno.ELOOP:
            raise
    os.unlink(path)  # a link at a slot's name (dangling or not): replace it, never follow it
    return fileio.open_nofollow(path, os.O_RDONLY | os.O_CREAT | os.O_EXCL, 0o644)


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


def acquire(
    directory: Path,
    count: int,
    *,
    timeout: float | None = None,
    on_reclaim: Callable[[Holder], object] | None = None,
) -> Slot | None:
    """Wait until one of ``count`` slots is free and take it. Returns None only when ``timeout`` expires.

    Polls with a short, growing interval: waiting is cheap (one flock attempt per slot), and a freed slot is
    taken within half a second. Every second of waiting, slots held by processes of dead builds are reclaimed
    (``reclaim``); ``on_reclaim`` hears of each process ended that way.
    """
    deadline = None if timeout is None else time.monotonic() + timeout
    delay = _POLL_START
    next_reclaim = time.monotonic() + _RECLAIM_EVERY_S
    while True:
        slot = try_acquire(directory, count)
        if slot is not None:
            return slot
        now = time.monotonic()
        if deadline is not None and now >= deadline:
            return None
        if now >= next_reclaim:
            next_reclaim = now + _RECLAIM_EVERY_S
            for holder in reclaim(directory):
                if on_reclaim is not None:
                    on_reclaim(holder)
            delay = _POLL_START
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


# -- who holds the slots, and reclaiming the ones dead builds left ------------------------------------------


@dataclass(frozen=True)
class Holder:
    """A live process that has a held slot's file open (the launcher, its compiler, their children)."""

    slot: int
    pid: int
    command: str
    owner: (
        tuple[int, int] | None
    )  # the jitguard process of its build: (pid, start ticks), from its environment
    module: str | None

    @property
    def orphaned(self) -> bool:
        """Its build's jitguard process is gone (or the pid now names a later process)."""
        return self.owner is not None and start_time(self.owner[0]) != self.owner[1]

    def describe(self) -> str:
        text = f"slot {self.slot}: pid {self.pid} ({self.command[:120]})"
        if self.owner is not None:
            build = f"build of {self.module or 'a module'} by jitguard pid {self.owner[0]}"
            text += f", {build}" + (" which has exited" if self.orphaned else "")
        else:
            text += ", not a jitguard build"
        return text


def _proc_text(pid: int, name: str, proc: Path) -> str:
    try:
        return (proc / str(pid) / name).read_bytes().replace(b"\0", b" ").decode("utf-8", "replace").strip()
    except OSError:
        return ""


def _build_of(pid: int, proc: Path) -> tuple[tuple[int, int] | None, str | None]:
    """(owner, module) from the environment of ``pid`` (readable for our own processes and for root)."""
    try:
        raw = (proc / str(pid) / "environ").read_bytes()
    except OSError:
        return None, None
    env = dict(item.partition(b"=")[::2] for item in raw.split(b"\0") if b"=" in item)
    owner_text = env.get(OWNER_ENV.encode(), b"").decode("ascii", "replace")
    module = env.get(MODULE_ENV.encode(), b"").decode("utf-8", "replace") or None
    pid_text, _, ticks_text = owner_text.partition(":")
    if not (pid_text.isdigit() and ticks_text.isdigit()):
        return None, module
    return (int(pid_text), int(ticks_text)), module


def _slot_inodes(directory: Path) -> dict[tuple[int, int], int]:
    found: dict[tuple[int, int], int] = {}
    with contextlib.suppress(OSError):
        for path in Path(directory).glob(f"{SLOT_PREFIX}*"):
            with contextlib.suppress(OSError, ValueError):
                st = path.stat()
                found[(st.st_dev, st.st_ino)] = int(path.name[len(SLOT_PREFIX) :])
    return found


def holders_of(directory: Path, *, proc: Path = Path("/proc")) -> list[Holder]:
    """Every live process that has a held slot of ``directory`` open, lowest slot first.

    Reads /proc/*/fd (our own processes, or every one for root); a holder of another user may be missed."""
    held = set(holders(directory, proc_locks=proc / "locks"))
    inodes = {key: index for key, index in _slot_inodes(directory).items() if index in held}
    if not inodes:
        return []
    prefix = str(Path(directory).resolve())
    found: list[Holder] = []
    for entry in os.scandir(proc):
        if not entry.name.isdigit():
            continue
        pid = int(entry.name)
        try:
            fds = os.listdir(f"{entry.path}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                if not os.readlink(f"{entry.path}/fd/{fd}").startswith(prefix):
                    continue
                st = os.stat(f"{entry.path}/fd/{fd}")
            except OSError:
                continue
            index = inodes.get((st.st_dev, st.st_ino))
            if index is not None:
                owner, module = _build_of(pid, proc)
                found.append(Holder(index, pid, _proc_text(pid, "cmdline", proc), owner, module))
                break
    return sorted(found, key=lambda h: (h.slot, h.pid))


def _lock_holder_is_live_build(pid: int, proc: Path) -> bool:
    """The process /proc/locks names is alive and its build's jitguard too (or it is not a jitguard build, or
    it lives in another pid namespace: pid 0, nothing to judge)."""
    if pid <= 0:
        return True
    if start_time(pid) is None:
        return False
    owner, _ = _build_of(pid, proc)
    return owner is None or start_time(owner[0]) == owner[1]


def _same_pid_namespace(pid: int, proc: Path) -> bool:
    try:
        return os.readlink(proc / str(pid) / "ns" / "pid") == os.readlink(proc / "self" / "ns" / "pid")
    except OSError:
        return False


def reclaim(directory: Path, *, proc: Path = Path("/proc")) -> list[Holder]:
    """SIGKILL every process that holds a slot of ``directory`` for a build whose jitguard has exited, so the
    slot is free at once; returns them. Holders that are not jitguard builds are never touched."""
    locked = holders(directory, proc_locks=proc / "locks")
    # The cheap check first: a slot taken by a live launcher of a live build needs no /proc/*/fd scan.
    if all(_lock_holder_is_live_build(pid, proc) for pid in locked.values()):
        return []
    ended = []
    for holder in holders_of(directory, proc=proc):
        # An owner pid means something only in our own pid namespace.
        if holder.orphaned and _same_pid_namespace(holder.pid, proc):
            try:
                os.kill(holder.pid, signal.SIGKILL)
            except OSError:
                continue
            ended.append(holder)
    return ended
