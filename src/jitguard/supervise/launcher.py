"""The compile-command prefix of supervised builds: hold one host-wide slot while the real command runs.

    python -m jitguard.supervise.launcher [--slots DIR --count N] -- <compiler> <args...>

DIR and N come from the flags or from ``JITGUARD_SLOTS_DIR`` / ``JITGUARD_SLOT_COUNT`` (the environment keeps
ninja's command line the same for every attempt). It says on stderr when the command died of a signal
(ninja does not), forwards signals to the command's group and SIGKILLs it after the grace, and dies with
ninja. Runs once per compile: stdlib only, beyond ``slots``, ``keeper`` and ``compiler_cache_launch``.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from jitguard import config
from jitguard.errors import ConfigError
from jitguard.fleet import compiler_cache_launch
from jitguard.supervise import slots
from jitguard.supervise.keeper import PR_SET_PDEATHSIG, prctl

# The runner looks for this exact text (see supervise.oom) to learn that a job died by SIGKILL.
KILLED_MARKER = "jitguard-launch: killed by signal"
_FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)
SLOTS_DIR_ENV = "JITGUARD_SLOTS_DIR"
SLOT_COUNT_ENV = "JITGUARD_SLOT_COUNT"
GRACE_ENV = "JITGUARD_KILL_GRACE"
_DEFAULT_GRACE_S = 3.0
USAGE = "usage: python -m jitguard.supervise.launcher [--slots DIR --count N] -- COMMAND [ARGS...]"


def _parse(argv: Sequence[str]) -> tuple[Path | None, int, list[str]]:
    args = list(argv)
    if "--" not in args:
        raise ValueError("missing '--' before the command")
    split = args.index("--")
    options, command = args[:split], args[split + 1 :]
    if not command:
        raise ValueError("no command after '--'")
    directory: Path | None = config.read(SLOTS_DIR_ENV)
    try:
        count: int | None = config.read(SLOT_COUNT_ENV)
    except ConfigError:
        count = None
    it = iter(options)
    for flag in it:
        value = next(it, None)
        if value is None:
            raise ValueError(f"{flag} needs a value")
        if flag == "--slots":
            directory = Path(value)
        elif flag == "--count":
            if not (value.isascii() and value.isdigit()):
                raise ValueError(f"--count {value!r}: expected a whole number N >= 1")
            count = int(value)
        else:
            raise ValueError(f"unknown option {flag}")
    if directory is not None and (count is None or count < 1):
        raise ValueError(f"a slots directory needs a slot count N >= 1 (--count or {SLOT_COUNT_ENV})")
    return directory, count or 0, command


def _grace() -> float:
    try:
        return max(0.0, float(config.read(GRACE_ENV) or _DEFAULT_GRACE_S))
    except ValueError:
        return _DEFAULT_GRACE_S


def _say_reclaimed(holder: slots.Holder) -> None:
    sys.stderr.write(
        f"jitguard-launch: reclaimed a compile slot from a dead build: ended {holder.describe()}\n"
    )


def _command_setup() -> None:
    # In the forked child, before exec (the launcher is single-threaded, so this is safe): a process group of
    # its own, and death with the launcher.
    os.setpgid(0, 0)
    prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def _compiler_cache(command: list[str]) -> compiler_cache_launch.Wrapper | None:
    """The sccache wrapper of this compile when the attempt uses one and its server runs; a cache that cannot
    be used means the plain command (the runner reports why, once per build)."""
    try:
        cached = compiler_cache_launch.wrapper_for(command, os.environ)
        if cached is not None and compiler_cache_launch.ensure_server(cached) is None:
            return cached
    except Exception:
        pass
    return None


def run(argv: Sequence[str]) -> int:
    """Hold a slot, run the command, return the exit status to exit with."""
    try:
        directory, count, command = _parse(argv)
    except ValueError as exc:
        sys.stderr.write(f"jitguard-launch: {exc}\n{USAGE}\n")
        return 2
    parent = os.getppid()
    prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    if os.getppid() != parent:  # ninja died before the kernel could be asked to tell us
        return 128 + signal.SIGTERM

    cached = _compiler_cache(command)
    # A signal while waiting for a slot ends the launcher the default way (nothing runs yet).
    slot = slots.acquire(directory, count, on_reclaim=_say_reclaimed) if directory is not None else None
    env = dict(os.environ)
    if slot is not None:
        env["JITGUARD_SLOT"] = str(slot.index)
    # Behind sccache the launcher alone holds the slot: a server that a client starts must not inherit it.
    inherited = (slot.fd,) if slot is not None and cached is None else ()
    try:
        child = subprocess.Popen(
            [cached.binary, *command] if cached else command,
            env=env,
            pass_fds=inherited,
            preexec_fn=_command_setup,
        )
    except OSError as exc:
        sys.stderr.write(f"jitguard-launch: cannot run {command[0]}: {exc.strerror or exc}\n")
        return 127

    def kill_group(_signum: int = 0, _frame: object = None) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(child.pid, signal.SIGKILL)

    stopping: list[int] = []

    def forward(signum: int, _frame: object) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(child.pid, signum)
        if not stopping:  # the first stop signal starts the grace period
            stopping.append(signum)
            signal.setitimer(signal.ITIMER_REAL, max(_grace(), 0.001))

    signal.signal(signal.SIGALRM, kill_group)
    for sig in _FORWARDED:
        signal.signal(sig, forward)
    status = child.wait()
    if stopping:
        # What the command left in its group must not outlive the launcher either.
        signal.setitimer(signal.ITIMER_REAL, 0)
        kill_group()
    if slot is not None:
        slot.release()
    if cached is not None and not stopping:
        with contextlib.suppress(Exception):  # stats are a report, never a reason to fail a compile
            compiler_cache_launch.snapshot_stats(cached)
    if status >= 0 and not stopping:
        return status
    signum = stopping[0] if stopping else -status
    name = signal.Signals(signum).name if signum in signal.Signals._value2member_map_ else str(signum)
    if signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT):
        # Die the same way (also when the grace period ran out and the command got SIGKILL), so ninja sees an
        # interrupted child and stops like it would without us.
        for sig in _FORWARDED:
            signal.signal(sig, signal.SIG_DFL)
        os.kill(os.getpid(), signum)
    hint = " (usually the out-of-memory killer)" if signum == signal.SIGKILL else ""
    sys.stderr.write(f"{KILLED_MARKER} {signum} ({name}){hint}: {' '.join(command)[:200]}\n")
    return 128 + signum


def main() -> None:
    raise SystemExit(run(sys.argv[1:]))


if __name__ == "__main__":
    main()
