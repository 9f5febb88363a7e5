"""A command run under a keeper in its own session, whose whole process tree is measured and killed: no orphans.

ninja puts every command it runs into a process group of its own (so a Ctrl-C on the terminal reaches ninja
only), so "kill the process group" is not enough, and a compile step may double-fork and ``setsid`` out of
the session too. The command is therefore started under ``keeper.py``, in a session of its own: the keeper is
a child subreaper (orphans of the build are re-parented to it, not to init), runs the attempt in a cgroup of
its own where the host allows one (``build_cgroup``), dies-with-jitguard (PR_SET_PDEATHSIG) and then stops the
build itself: SIGTERM, a grace period, SIGKILL. ``members()`` finds the tree through the parent links, the
session and the cgroup. Killing is: SIGTERM to the keeper, which stops everything below it the same way,
then whatever is still there (if the keeper could not) gets SIGSTOP and SIGKILL, repeated until nothing runs.

While any tree is alive, SIGTERM and SIGHUP handlers (chained to the previous ones) and an atexit hook kill it
before this process goes. When this process is SIGKILLed, the keeper does the killing.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import psutil

from jitguard.supervise import build_cgroup, keeper

_HANDLED_SIGNALS = (signal.SIGTERM, signal.SIGHUP)


KEEPER = Path(keeper.__file__)
DEFAULT_GRACE_S = 3.0  # SIGTERM -> SIGKILL: how long a process of the build gets to exit by itself
_KEEPER_SLACK_S = 1.0  # beyond the grace period: the keeper's own SIGKILL round, before this process steps in


def _keeper_argv(
    argv: Sequence[str], grace: float, cgroup: keeper.Cgroup | None, status_fd: int
) -> list[str]:
    # A fresh interpreter without site-packages (-I -S): no Python code of ours runs between fork and exec in
    # this (maybe multithreaded) process, and the keeper starts in milliseconds.
    arg = cgroup.to_arg() if cgroup else "-"
    return [
        sys.executable,
        "-I",
        "-S",
        str(KEEPER),
        str(os.getpid()),
        f"{grace:g}",
        arg,
        str(status_fd),
        "--",
        *argv,
    ]


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
    """A started command (under its keeper) and everything it spawns."""

    def __init__(
        self,
        popen: subprocess.Popen[bytes],
        command_pid: int | None,
        cgroup: keeper.Cgroup | None,
        grace: float = DEFAULT_GRACE_S,
    ) -> None:
        self.popen = popen
        self.grace = grace
        self.pid = popen.pid  # the keeper
        self.sid = popen.pid  # setsid: the keeper leads its own session
        self.command_pid = command_pid  # the command (ninja): its children are the jobs
        self.cgroup = cgroup
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
        keep_fds: Sequence[int] = (),
        grace: float = DEFAULT_GRACE_S,
        cgroup: str | None = None,
    ) -> ProcessTree:
        """Start ``argv`` under a keeper. ``keep_fds`` stay open in the keeper only (the build lock: released
        when the whole tree is gone); ``cgroup``: see ``build_cgroup.create`` (None: JITGUARD_CGROUP)."""
        group = build_cgroup.create(cgroup)
        read_end, write_end = os.pipe()
        try:
            popen = subprocess.Popen(
                _keeper_argv(argv, grace, group, write_end),
                cwd=cwd,
                env=dict(env) if env is not None else None,
                stdin=subprocess.DEVNULL,
                stdout=stdout,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                pass_fds=(write_end, *keep_fds),
            )
        except BaseException:
            os.close(read_end)
            if group is not None:
                group.remove()
            raise
        finally:
            os.close(write_end)
        with os.fdopen(read_end, "rb") as status:
            line = status.readline().strip()  # the keeper writes the command's pid, or exits without
        tree = cls(popen, int(line) if line.isdigit() else None, group, grace)
        _register(tree)
        return tree

    # -- looking --------------------------------------------------------------------------------------------

    def members(self, *, include_session: bool = True) -> list[psutil.Process]:
        """Every live process of the tree: the keeper, its descendants, its cgroup and (optionally) its
        session."""
        found: dict[int, psutil.Process] = {}
        try:
            found[self.pid] = self._root
            for child in self._root.children(recursive=True):
                found[child.pid] = child
        except psutil.Error:
            pass
        extra = set(self.cgroup.pids()) if self.cgroup is not None else set()
        if include_session:
            for proc in psutil.process_iter():
                with contextlib.suppress(OSError):
                    if proc.pid not in found and os.getsid(proc.pid) == self.sid:
                        found[proc.pid] = proc
        for pid in extra - set(found) - {os.getpid()}:
            with contextlib.suppress(psutil.Error):
                found[pid] = psutil.Process(pid)
        return [p for p in found.values() if _alive(p)]

    def sample(self) -> TreeSample:
        """RSS and CPU of the build now (the keeper, jitguard's own, is not counted), and RSS per job (per
        direct child of the command: per ninja command)."""
        procs = [p for p in self.members(include_session=False) if p.pid != self.pid]
        top_parent = self.command_pid or self.pid
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
            if pid == top_parent:
                continue
            top = pid
            seen = 0
            while parents.get(top) not in (top_parent, None) and seen < 64:
                top = parents[top]
                seen += 1
            if parents.get(top) == top_parent:
                job_rss[top] = job_rss.get(top, 0) + rss
        return TreeSample(rss_total, cpu_total, frozenset(rss_of), job_rss, len(rss_of))

    def poll(self) -> int | None:
        return self.popen.poll()

    # -- ending ---------------------------------------------------------------------------------------------

    def kill(self, *, grace: float | None = None) -> None:
        """End every process of the tree: SIGTERM, up to ``grace`` s (default: the tree's), then SIGSTOP +
        SIGKILL what is left.

        The keeper does it for its tree (it sees what is re-parented to it); what it cannot reach, or all of it
        when it does not finish within the grace period, is killed from here."""
        self.killed = True
        grace = self.grace if grace is None else grace
        try:
            if self.popen.poll() is None:
                with contextlib.suppress(OSError):
                    self.popen.send_signal(signal.SIGTERM)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    self.popen.wait(timeout=grace + _KEEPER_SLACK_S)
            keeper.terminate(
                lambda: [p.pid for p in self.members()], grace=0.0, cgroup=self.cgroup, reap=self.popen.poll
            )
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.popen.wait(timeout=5)
        finally:
            self._close()

    def finish(self) -> None:
        """The keeper has exited: make sure nothing it left behind keeps running, and stop tracking it."""
        if self.members():
            self.kill(grace=1.0)
        self._close()

    def _close(self) -> None:
        if self.cgroup is not None:
            self.cgroup.remove()
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
