"""The keeper: the root of every supervised process tree, so that nothing of a build outlives jitguard.

    python -I -S keeper.py PARENT_PID GRACE CGROUP|- STATUS_FD -- COMMAND [ARGS...]

A child subreaper with PR_SET_PDEATHSIG, running the command in the attempt's cgroup when there is one; it
reaps what is re-parented to it, ends the whole tree (SIGTERM, grace, SIGKILL) when jitguard dies or asks,
and holds the build lock until the tree is gone (docs/reliability.md). Standard library only: it starts in
milliseconds, and ``process_tree`` shares its helpers.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
import time
from collections.abc import Callable, Iterable
from typing import Any

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
CGROUP_PREFIX = "jitguard-"
_STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)
_KILL_ROUNDS_S = 10.0  # after the grace period: how long SIGKILL rounds go on (a process in D state waits)


def prctl(option: int, value: int) -> bool:
    """``prctl(option, value)``; False where there is no libc to ask (not Linux/glibc) or it refuses."""
    try:
        return int(ctypes.CDLL(None, use_errno=True).prctl(option, value, 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False


# -- looking at /proc without psutil ----------------------------------------------------------------------


def _stat_fields(pid: int) -> list[str] | None:
    """Fields of /proc/PID/stat after the command name (which may hold spaces and parentheses)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            text = fh.read().decode("ascii", "replace")
    except OSError:
        return None
    return text.rpartition(")")[2].split()


def start_time(pid: int) -> int | None:
    """The start time of ``pid`` in clock ticks since boot: with the pid, a name no later process reuses."""
    fields = _stat_fields(pid)
    return int(fields[19]) if fields and len(fields) > 19 else None


def running(pid: int) -> bool:
    """``pid`` exists and is not a zombie."""
    fields = _stat_fields(pid)
    return fields is not None and len(fields) > 0 and fields[0] not in ("Z", "X")


def descendants(root: int) -> list[int]:
    """Every live process below ``root`` (children, their children, ...), from the parent links in /proc."""
    children: dict[int, list[int]] = {}
    try:
        names = os.listdir("/proc")
    except OSError:
        return []
    for name in names:
        if not name.isdigit():
            continue
        fields = _stat_fields(int(name))
        if fields and len(fields) > 1 and fields[0] not in ("Z", "X"):
            children.setdefault(int(fields[1]), []).append(int(name))
    found: list[int] = []
    todo = list(children.get(root, ()))
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo.extend(children.get(pid, ()))
    return found


# -- the per-attempt cgroup -------------------------------------------------------------------------------


class Cgroup:
    """A cgroup of one build attempt: every process started in it stays in it, wherever it is re-parented.

    ``version`` 2 kills through ``cgroup.kill`` (Linux 5.14+); version 1 uses the freezer hierarchy: freeze,
    SIGKILL every member, thaw, so nothing forks between the listing and the kill.
    """

    def __init__(self, path: str, version: int) -> None:
        self.path = path
        self.version = version

    def __repr__(self) -> str:
        return f"Cgroup({self.path!r}, v{self.version})"

    @classmethod
    def from_arg(cls, text: str) -> Cgroup | None:
        if text == "-":
            return None
        version, _, path = text.partition(":")
        return cls(path, int(version))

    def to_arg(self) -> str:
        return f"{self.version}:{self.path}"

    def _write(self, name: str, value: str) -> bool:
        try:
            with open(os.path.join(self.path, name), "w") as fh:
                fh.write(value)
            return True
        except OSError:
            return False

    def join(self, pid: int = 0) -> bool:
        return self._write("cgroup.procs", str(pid or os.getpid()))

    def pids(self) -> list[int]:
        try:
            with open(os.path.join(self.path, "cgroup.procs")) as fh:
                return [int(line) for line in fh if line.strip().isdigit()]
        except OSError:
            return []

    def kill_all(self) -> None:
        if self.version == 2 and self._write("cgroup.kill", "1"):
            return
        frozen = self.version == 1 and self._write("freezer.state", "FROZEN")
        for pid in self.pids():
            if pid != os.getpid():
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
        if frozen:
            self._write("freezer.state", "THAWED")  # a frozen process does not act on SIGKILL until thawed

    def remove(self) -> bool:
        """Remove the cgroup once it is empty (True when it is gone)."""
        for _ in range(50):  # the last members may take a moment to be released after they were reaped
            try:
                os.rmdir(self.path)
                return True
            except FileNotFoundError:
                return True
            except OSError:
                time.sleep(0.02)
        return False


# -- stopping a tree --------------------------------------------------------------------------------------


def _signal_all(pids: Iterable[int], signum: int) -> None:
    for pid in pids:
        with contextlib.suppress(OSError):
            os.kill(pid, signum)


def terminate(
    members: Callable[[], list[int]],
    *,
    grace: float,
    cgroup: Cgroup | None = None,
    reap: Callable[[], object] = lambda: None,
) -> list[int]:
    """SIGTERM to every member, up to ``grace`` s for them to exit, then SIGSTOP + SIGKILL (or the cgroup's
    kill) until none is left. ``members()`` lists the live processes now; ``reap()`` collects exited
    children. Returns the pids still alive after the SIGKILL rounds (processes stuck in the kernel)."""
    _signal_all(members(), signal.SIGTERM)
    deadline = time.monotonic() + grace
    left = members()
    while left and time.monotonic() < deadline:
        time.sleep(0.05)
        reap()
        left = members()
    deadline = time.monotonic() + _KILL_ROUNDS_S
    while left and time.monotonic() < deadline:
        if cgroup is not None:
            cgroup.kill_all()
        _signal_all(left, signal.SIGSTOP)  # stopped processes cannot fork while the rest is killed
        _signal_all(members(), signal.SIGKILL)
        time.sleep(0.05)
        reap()
        left = members()
    return left


# -- the keeper process -----------------------------------------------------------------------------------


class _Stop(Exception):
    pass


def _reap() -> None:
    """Collect every exited child (the keeper is the subreaper of the whole build)."""
    with contextlib.suppress(ChildProcessError):
        while os.waitpid(-1, os.WNOHANG)[0] != 0:
            pass


def _wait_for_children(timeout: float) -> None:
    """Reap the children still on their way out, for at most ``timeout`` s. A multi-threaded process (the
    sccache server) that was killed shows as a zombie before its threads are gone and cannot be reaped until
    they are: a keeper that exits then leaves it to init, and its CPU time (its compilers') is lost."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return  # no child left
        if pid == 0:
            time.sleep(0.02)


def _exit_code(raw: int) -> int:
    return 128 + os.WTERMSIG(raw) if os.WIFSIGNALED(raw) else os.WEXITSTATUS(raw)


def _spawn(argv: list[str], cgroup: Cgroup | None) -> int:
    pid = os.fork()
    if pid == 0:  # the keeper is single-threaded: code between fork and exec is safe here
        try:
            for sig in _STOP_SIGNALS:
                signal.signal(sig, signal.SIG_DFL)
            prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
            if cgroup is not None:
                # The command joins, not the keeper: freezing or killing the cgroup must not stop the keeper.
                cgroup.join()
            os.execvp(argv[0], argv)
        except OSError as exc:
            os.write(2, f"jitguard: cannot run {argv[0]}: {exc.strerror or exc}\n".encode())
        os._exit(127)
    return pid


def main(argv: list[str]) -> int:
    parent, grace, cgroup = int(argv[0]), float(argv[1]), Cgroup.from_arg(argv[2])
    status_fd, command = int(argv[3]), argv[5:]
    me = os.getpid()

    def stop(signum: int, _frame: Any) -> None:
        raise _Stop(signum)

    def members() -> list[int]:
        found = set(descendants(me))
        if cgroup is not None:
            found.update(pid for pid in cgroup.pids() if pid != me and running(pid))
        return sorted(found)

    try:
        for sig in _STOP_SIGNALS:
            signal.signal(sig, stop)
        prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
        if os.getppid() != parent:  # jitguard died before the kernel could be asked to tell us
            return 128 + signal.SIGTERM
        prctl(PR_SET_CHILD_SUBREAPER, 1)
        command_pid = _spawn(command, cgroup)
        os.write(status_fd, f"{command_pid}\n".encode())
        os.close(status_fd)
        while True:  # reap the processes re-parented to us as they exit, until the command itself does
            pid, raw = os.waitpid(-1, 0)
            if pid == command_pid:
                break
        code = _exit_code(raw)
        # The command is gone; whatever it left behind is a leak: stop it.
        terminate(members, grace=min(grace, 1.0), cgroup=cgroup, reap=_reap)
    except _Stop as why:
        code = 128 + int(why.args[0])
        for sig in _STOP_SIGNALS:  # a second signal must not interrupt the stopping
            signal.signal(sig, signal.SIG_IGN)
        terminate(members, grace=grace, cgroup=cgroup, reap=_reap)
    _wait_for_children(2.0)
    if cgroup is not None:
        cgroup.remove()
    return code


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
