"""A command run in its own session, whose whole process tree can be measured and killed, leaving no orphans.

ninja puts every command it runs into a process group of its own (so a Ctrl-C on the terminal reaches ninja
only), so "kill the process group" is not enough. The tree is started with ``setsid``: every process it spawns
stays in that session unless it leaves on purpose, and ``members()`` finds them through the session id as well
as through the parent links. Killing is: SIGTERM to everything (ninja forwards it and removes half-written
outputs), a short grace period, then SIGSTOP (so nothing forks while we look) and SIGKILL to whatever is left,
repeated until nothing of the tree runs.

While any tree is alive, SIGTERM and SIGHUP handlers (chained to the previous ones) and an atexit hook kill it
before this process goes; the tree's root also gets SIGTERM from the kernel if this process dies without a
chance to clean up (PR_SET_PDEATHSIG), and ninja passes that on to its jobs.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import psutil

_HANDLED_SIGNALS = (signal.SIGTERM, signal.SIGHUP)


def _load_libc() -> Any:
    try:
        return ctypes.CDLL(None, use_errno=True)
    except OSError:
        return None


_LIBC = _load_libc()


# The root is started through this tiny exec wrapper instead of a ``preexec_fn``: Python code between fork and
# exec can deadlock in a multithreaded parent (an inference engine always is), while a fresh interpreter is safe.
# It asks the kernel for SIGTERM when its parent dies, checks the parent did not die before that, then becomes
# the real command (same pid).
_EXEC_WITH_PDEATHSIG = (
    "import ctypes, os, signal, sys\n"
    "ctypes.CDLL(None).prctl(1, signal.SIGTERM)\n"  # PR_SET_PDEATHSIG
    "os.getppid() == int(sys.argv[1]) or os._exit(143)\n"
    "os.execvp(sys.argv[2], sys.argv[2:])\n"
)


def _with_pdeathsig(argv: Sequence[str]) -> list[str]:
    if _LIBC is None:  # no libc to ask (not Linux/glibc): run the command as it is
        return list(argv)
    return [sys.executable, "-I", "-S", "-c", _EXEC_WITH_PDEATHSIG, str(os.getpid()), *argv]


@dataclass(frozen=True)
class TreeSample:
    """One measurement of the running tree."""

    rss_bytes: int  # sum over every live process of the tree
    cpu_seconds: float  # user + system of the live processes (and of children they have reaped)
    pids: frozenset[int]
    job_rss: dict[int, int] = field(default_factory=dict)  # direct child of the root -> RSS of its subtree
    process_count: int = 0


def _alive(proc: psutil.Process) -> bool:
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


class ProcessTree:
    """A started command and everything it spawns."""

    def __init__(self, popen: subprocess.Popen[bytes]) -> None:
        self.popen = popen
        self.pid = popen.pid
        self.sid = popen.pid  # setsid: the root leads its own session
        self._root = psutil.Process(popen.pid)
        self.killed = False

    @classmethod
    def start(
        cls,
        argv: Sequence[str],
        *,
        cwd: Path | None = None,
        env: Mapping[str, str] | None = None,
        stdout: int | IO[bytes] | None = subprocess.PIPE,
    ) -> ProcessTree:
        popen = subprocess.Popen(
            _with_pdeathsig(argv),
            cwd=cwd,
            env=dict(env) if env is not None else None,
            stdin=subprocess.DEVNULL,
            stdout=stdout,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        tree = cls(popen)
        _register(tree)
        return tree

    # -- looking --------------------------------------------------------------------------------------------

    def members(self, *, include_session: bool = True) -> list[psutil.Process]:
        """Every live process of the tree: the root, its descendants and (optionally) its session."""
        found: dict[int, psutil.Process] = {}
        try:
            found[self.pid] = self._root
            for child in self._root.children(recursive=True):
                found[child.pid] = child
        except psutil.Error:
            pass
        if include_session:
            for proc in psutil.process_iter():
                if proc.pid in found:
                    continue
                try:
                    if os.getsid(proc.pid) == self.sid:
                        found[proc.pid] = proc
                except OSError:
                    continue
        return [p for p in found.values() if _alive(p)]

    def sample(self) -> TreeSample:
        """RSS and CPU of the tree now, and RSS per job (per direct child of the root: per ninja command)."""
        procs = self.members(include_session=False)
        rss_total = 0
        cpu_total = 0.0
        parents: dict[int, int] = {}
        rss_of: dict[int, int] = {}
        for proc in procs:
            try:
                with proc.oneshot():
                    rss = proc.memory_info().rss
                    times = proc.cpu_times()
                    parents[proc.pid] = proc.ppid()
            except psutil.Error:
                continue
            rss_of[proc.pid] = rss
            rss_total += rss
            cpu_total += times.user + times.system + times.children_user + times.children_system
        job_rss: dict[int, int] = {}
        for pid, rss in rss_of.items():
            if pid == self.pid:
                continue
            top = pid
            seen = 0
            while parents.get(top) not in (self.pid, None) and seen < 64:
                top = parents[top]
                seen += 1
            if parents.get(top) == self.pid:
                job_rss[top] = job_rss.get(top, 0) + rss
        return TreeSample(rss_total, cpu_total, frozenset(rss_of), job_rss, len(rss_of))

    def poll(self) -> int | None:
        return self.popen.poll()

    # -- ending ---------------------------------------------------------------------------------------------

    def kill(self, *, grace: float = 3.0) -> None:
        """End every process of the tree: SIGTERM, up to ``grace`` s, then SIGSTOP + SIGKILL what is left."""
        self.killed = True
        try:
            procs = self.members()
            for proc in procs:
                with contextlib.suppress(psutil.Error):
                    proc.send_signal(signal.SIGTERM)
            deadline = time.monotonic() + grace
            while procs and time.monotonic() < deadline:
                self.popen.poll()  # reap the root so it does not linger as a zombie
                procs = [p for p in procs if _alive(p)]
                if procs:
                    time.sleep(0.05)
            for _ in range(20):
                procs = self.members()
                if not procs:
                    break
                for proc in procs:
                    with contextlib.suppress(psutil.Error):
                        proc.send_signal(signal.SIGSTOP)
                for proc in self.members():
                    with contextlib.suppress(psutil.Error):
                        proc.send_signal(signal.SIGKILL)
                self.popen.poll()
                time.sleep(0.05)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.popen.wait(timeout=5)
        finally:
            _unregister(self)

    def finish(self) -> None:
        """The root has exited: make sure nothing it left behind keeps running, and stop tracking it."""
        if self.members():
            self.kill(grace=1.0)
        _unregister(self)


# -- the registry of live trees: atexit and signal handlers ------------------------------------------------

_LIVE: set[ProcessTree] = set()
_LOCK = threading.Lock()
_PREVIOUS: dict[int, Any] = {}
_ATEXIT_DONE = False


def live_trees() -> list[ProcessTree]:
    with _LOCK:
        return list(_LIVE)


def kill_all(grace: float = 1.0) -> None:
    """Kill every live tree (used at exit and on SIGTERM/SIGHUP)."""
    for tree in live_trees():
        with contextlib.suppress(Exception):
            tree.kill(grace=grace)


def _on_signal(signum: int, frame: Any) -> None:
    kill_all()
    previous = _PREVIOUS.get(signum, signal.SIG_DFL)
    if callable(previous):
        previous(signum, frame)
    elif previous == signal.SIG_DFL:
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)


def _register(tree: ProcessTree) -> None:
    global _ATEXIT_DONE
    with _LOCK:
        first = not _LIVE
        _LIVE.add(tree)
        if not _ATEXIT_DONE:
            atexit.register(kill_all)
            _ATEXIT_DONE = True
    if first and threading.current_thread() is threading.main_thread():
        for sig in _HANDLED_SIGNALS:
            try:
                current = signal.getsignal(sig)
                if current is _on_signal:
                    continue
                _PREVIOUS[sig] = current
                signal.signal(sig, _on_signal)
            except (ValueError, OSError):
                pass


def _unregister(tree: ProcessTree) -> None:
    with _LOCK:
        _LIVE.discard(tree)
        last = not _LIVE
    if last and threading.current_thread() is threading.main_thread():
        for sig, previous in list(_PREVIOUS.items()):
            try:
                if signal.getsignal(sig) is _on_signal:
                    signal.signal(sig, previous if previous is not None else signal.SIG_DFL)
            except (ValueError, OSError, TypeError):
                pass
            _PREVIOUS.pop(sig, None)
