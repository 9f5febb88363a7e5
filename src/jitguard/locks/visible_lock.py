"""The build lock of one module, with visible waits: one build for many ranks, and everyone knows who builds.

The same kernel ``flock`` on the same file as FlashInfer's silent ``FileLock`` (so stock FlashInfer is excluded
too), plus a sidecar naming the holder (pid, host, start, progress, log), a log line every few seconds while
waiting, ``JITGUARD_LOCK_TIMEOUT`` (``LockTimeout``) and takeover when the holder dies. On a network file
system the lock moves to a local stand-in (``locks.lock_dir``).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import logging
import os
import re
import socket
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from types import TracebackType
from typing import Any

from jitguard import fileio
from jitguard.config import format_duration as _duration
from jitguard.errors import LockTimeout, LockUnavailable
from jitguard.fileio import read_json, write_json
from jitguard.findings.catalog import make
from jitguard.locks.lock_dir import lock_path_for

LOGGER_NAME = "jitguard"
SIDECAR_SUFFIX = ".jitguard.json"
DEFAULT_REPORT_INTERVAL_S = 5.0
DEFAULT_POLL_INTERVAL_S = 0.2
_CONTENTION = frozenset({errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES})
_PROGRESS = re.compile(rb"\[(\d+)/(\d+)\]")
_LOG_TAIL_BYTES = 64 * 1024

log = logging.getLogger(f"{LOGGER_NAME}.lock")


@dataclass(frozen=True)
class HolderInfo:
    """What the sidecar says about the process holding (or last holding) a module's lock."""

    module: str
    pid: int
    host: str
    started: float
    progress: tuple[int, int] | None = None
    log_path: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "module": self.module,
            "pid": self.pid,
            "host": self.host,
            "started": self.started,
            "progress": list(self.progress) if self.progress else None,
            "log_path": self.log_path,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> HolderInfo | None:
        try:
            progress = data.get("progress")
            log_path = data.get("log_path")
            return cls(
                module=str(data["module"]),
                pid=int(data["pid"]),
                host=str(data["host"]),
                started=float(data["started"]),
                progress=(int(progress[0]), int(progress[1])) if progress else None,
                log_path=str(log_path) if log_path else None,
            )
        except (KeyError, TypeError, ValueError, IndexError):
            return None

    def is_alive(self) -> bool | None:
        """True/False for a holder on this host; None when it is on another host (cannot tell)."""
        if self.host != socket.gethostname():
            return None
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True

    def current_progress(self) -> tuple[int, int] | None:
        """The holder's reported progress, else the last ninja ``[k/n]`` in its build log."""
        if self.progress:
            return self.progress
        return progress_from_log(Path(self.log_path)) if self.log_path else None

    def describe(self, now: float | None = None) -> str:
        now = time.time() if now is None else now
        text = f"pid {self.pid} on {self.host} for {_duration(now - self.started)}"
        progress = self.current_progress()
        if progress:
            done, total = progress
            text += f", progress {done}/{total}"
        if self.log_path:
            text += f", log {self.log_path}"
        return text


def progress_from_log(path: Path) -> tuple[int, int] | None:
    """The last ninja-style ``[k/n]`` in the tail of a build log, or None."""
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(0, size - _LOG_TAIL_BYTES))
            tail = fh.read()
    except OSError:
        return None
    matches = _PROGRESS.findall(tail)
    if not matches:
        return None
    done, total = matches[-1]
    return int(done), int(total)


def _lock_timeout(module: str, waited: float, holder: HolderInfo | None, lock_path: Path) -> LockTimeout:
    who = holder.describe() if holder else "a process that did not say who it is (stock FlashInfer?)"
    finding = make(
        "lock-timeout",
        backend="flashinfer",
        evidence=[f"lock {lock_path} held by {who}", f"waited {_duration(waited)}"],
        module=module,
        waited=_duration(waited),
        timeout=_duration(waited),
        holder=who,
        lock_path=str(lock_path),
    )
    log_path = holder.log_path if holder else None
    return LockTimeout(
        module, finding, waited=waited, waited_text=_duration(waited), who=who, log_path=log_path
    )


class ModuleLock:
    """An exclusive, kernel-released (flock) lock on ``lock_path`` for building ``module``.

    Use as a context manager. Waiting is visible (a log line every ``report_interval`` seconds) and bounded by
    ``timeout`` seconds, after which ``LockTimeout`` is raised. ``took_over_from`` is set when the previous
    holder died holding it.
    """

    def __init__(
        self,
        lock_path: Path,
        module: str,
        *,
        timeout: float,
        log_path: Path | str | None = None,
        report_interval: float = DEFAULT_REPORT_INTERVAL_S,
        poll_interval: float = DEFAULT_POLL_INTERVAL_S,
        activity: str = "build",
        timeout_variable: str = "JITGUARD_LOCK_TIMEOUT",
        mount_table: str | None = None,
    ) -> None:
        if timeout < 0:
            raise ValueError("timeout must be >= 0")
        self.requested_path = Path(lock_path)
        # On a network file system the lock moves to a local stand-in (mount_table: default this process's).
        self.lock_path = _placed(self.requested_path, mount_table)
        self.sidecar_path = self.lock_path.with_name(self.lock_path.name + SIDECAR_SUFFIX)
        self.module = module
        self.timeout = timeout
        self.report_interval = report_interval
        self.poll_interval = poll_interval
        self.activity = activity  # what the holder does, for the waiters' lines: "build", "restore"
        self.timeout_variable = timeout_variable
        self._log_path = str(log_path) if log_path else None
        self._fd: int | None = None
        self._info: HolderInfo | None = None
        self.waited: float = 0.0
        self.took_over_from: HolderInfo | None = None

    # -- holder side ------------------------------------------------------------------------------------

    @property
    def held(self) -> bool:
        return self._fd is not None

    def fileno(self) -> int:
        """The locked file descriptor: a process that inherits it keeps the lock held until it exits too (the
        keeper of a build: a rank that takes over never builds beside the remains of a killed holder)."""
        if self._fd is None:
            raise RuntimeError(f"the build lock of {self.module} is not held")
        return self._fd

    def acquire(self) -> None:
        if self._fd is not None:
            raise RuntimeError(f"the build lock of {self.module} is already held by this object")
        ensure_visible_logging()
        try:
            self.lock_path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise LockUnavailable(self.module, self.lock_path, exc) from exc
        start = time.monotonic()
        next_report = start
        while True:
            try:
                fd = self._try_lock()
            except OSError as exc:
                raise LockUnavailable(self.module, self.lock_path, exc) from exc
            if fd is not None:
                break
            now = time.monotonic()
            waited = now - start
            if waited >= self.timeout:
                self.waited = waited
                raise _lock_timeout(self.module, waited, self.holder(), self.lock_path)
            if now >= next_report:
                self._report_wait(waited)
                next_report = now + self.report_interval
            time.sleep(min(self.poll_interval, max(0.0, self.timeout - waited)))
        self._fd = fd
        self.waited = time.monotonic() - start
        self._take_sidecar()

    def release(self) -> None:
        fd, self._fd = self._fd, None
        if fd is None:
            return
        # Remove the sidecar first: whoever gets the lock next must not mistake us for a dead holder.
        with contextlib.suppress(OSError):
            if self._sidecar_is_ours():
                self.sidecar_path.unlink()
        with contextlib.suppress(OSError):
            fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)

    def update_progress(self, done: int, total: int) -> None:
        """Tell waiters how far the build got (they also read ``[k/n]`` from the log by themselves)."""
        if self._info is not None:
            self._info = replace(self._info, progress=(done, total))
            self._write_sidecar()

    def set_log_path(self, log_path: Path | str) -> None:
        self._log_path = str(log_path)
        if self._info is not None:
            self._info = replace(self._info, log_path=self._log_path)
            self._write_sidecar()

    def __enter__(self) -> ModuleLock:
        self.acquire()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.release()

    # -- waiter side ------------------------------------------------------------------------------------

    def holder(self) -> HolderInfo | None:
        """The current holder as its sidecar tells, or None when unknown (no sidecar, or a dead pid)."""
        data = read_json(self.sidecar_path)
        info = HolderInfo.from_json(data) if data else None
        if info is None or info.is_alive() is False:
            return None
        return info

    # -- internals --------------------------------------------------------------------------------------

    def _try_lock(self) -> int | None:
        # Never through a link: a dangling one would make us create its target (as root, anywhere).
        try:
            fd = fileio.open_nofollow(self.lock_path, os.O_RDWR | os.O_CREAT, 0o666)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise OSError(
                    errno.ELOOP, "it is a symbolic link; remove it (jitguard never opens a lock through one)"
                ) from None
            raise
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(fd)
            if exc.errno in _CONTENTION:
                return None
            raise
        # The file may have been deleted and re-created (a cache wipe) while we opened it: a lock on an
        # unlinked inode excludes nobody, so only keep it when the path still names our inode.
        try:
            same = os.stat(self.lock_path).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            same = False
        if not same:
            os.close(fd)
            return None
        return fd

    def _take_sidecar(self) -> None:
        data = read_json(self.sidecar_path)
        previous = HolderInfo.from_json(data) if data else None
        me = (os.getpid(), socket.gethostname())
        if previous is not None and (previous.pid, previous.host) != me:
            # A holder releases by removing its sidecar first; one still here died holding the lock.
            self.took_over_from = previous
            log.warning(
                "jitguard: taking over the build of %s: the previous holder (%s) exited without finishing",
                self.module,
                previous.describe(),
            )
        self._info = HolderInfo(
            module=self.module,
            pid=os.getpid(),
            host=socket.gethostname(),
            started=time.time(),
            log_path=self._log_path,
        )
        self._write_sidecar()

    def _write_sidecar(self) -> None:
        if self._info is None:
            return
        try:
            write_json(self.sidecar_path, self._info.to_json())
        except OSError as exc:
            # Waiters then only see "unknown holder"; the lock itself still works.
            log.debug("cannot write %s: %s", self.sidecar_path, exc)

    def _sidecar_is_ours(self) -> bool:
        data = read_json(self.sidecar_path)
        info = HolderInfo.from_json(data) if data else None
        return info is not None and (info.pid, info.host) == (os.getpid(), socket.gethostname())

    def _report_wait(self, waited: float) -> None:
        data = read_json(self.sidecar_path)
        last = HolderInfo.from_json(data) if data else None
        if last is not None and last.is_alive() is not False:
            who = last.describe()
        elif last is not None:
            # Its keeper holds the lock until every process of that build is gone; then we take over.
            who = f"the build of pid {last.pid}, which has exited: its processes are being stopped"
        else:
            who = "a process that has not said who it is (stock FlashInfer, or starting)"
        log.warning(
            "jitguard: waiting for the %s of %s: lock held by %s; waited %s, giving up in %s (%s)",
            self.activity,
            self.module,
            who,
            _duration(waited),
            _duration(max(0.0, self.timeout - waited)),
            self.timeout_variable,
        )


def ensure_visible_logging() -> None:
    """Waits must be seen: when neither ``jitguard`` nor the root logger has a handler (the default in an
    engine that configures only its own logger), send jitguard's log lines to stderr."""
    logger = logging.getLogger(LOGGER_NAME)
    if logger.level == logging.NOTSET and not logger.isEnabledFor(logging.INFO):
        # An engine's root logger at WARNING (a library's basicConfig) would drop jitguard's INFO lines: the
        # compile a rank waits on, the kernel loaded instead of compiled. jitguard's own level stays the user's
        # to set (logging.getLogger("jitguard").setLevel(...)).
        logger.setLevel(logging.INFO)
    if logger.hasHandlers():
        return
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s", "%H:%M:%S"))
    logger.addHandler(handler)


def _placed(path: Path, mount_table: str | None) -> Path:
    try:
        return lock_path_for(path, table=mount_table)
    except OSError:  # no local place either: the lock itself then fails, and says why
        return path
