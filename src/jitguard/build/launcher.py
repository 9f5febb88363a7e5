"""The compile-command prefix of supervised builds: hold one host-wide slot while the real command runs.

    python -m jitguard.build.launcher --slots DIR --count N -- <compiler> <args...>

The runner rewrites every rule of the build.ninja it runs so the command starts with this (see
``build.manifest``). The launcher waits for a free slot (``build.slots``), runs the command with the slot's
file descriptor inherited (the slot stays taken while any process of the compile lives), forwards
SIGINT/SIGTERM/ SIGHUP/SIGQUIT to it, and exits with its status. When the command is killed by a signal the
launcher says so on stderr, in words the runner's OOM detection recognises, because ninja itself does not
report a child's signal.

Runs once per compile command: stdlib only, no jitguard imports beyond ``slots``.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from jitguard.build import slots

# The runner looks for this exact text (see build.oom) to learn that a job died by SIGKILL.
KILLED_MARKER = "jitguard-launch: killed by signal"
_FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)
USAGE = "usage: python -m jitguard.build.launcher --slots DIR --count N -- COMMAND [ARGS...]"


def _parse(argv: Sequence[str]) -> tuple[Path, int, list[str]]:
    args = list(argv)
    if "--" not in args:
        raise ValueError("missing '--' before the command")
    split = args.index("--")
    options, command = args[:split], args[split + 1 :]
    if not command:
        raise ValueError("no command after '--'")
    directory: Path | None = None
    count: int | None = None
    it = iter(options)
    for flag in it:
        value = next(it, None)
        if value is None:
            raise ValueError(f"{flag} needs a value")
        if flag == "--slots":
            directory = Path(value)
        elif flag == "--count":
            count = int(value)
        else:
            raise ValueError(f"unknown option {flag}")
    if directory is None or count is None or count < 1:
        raise ValueError("--slots DIR and --count N (N >= 1) are required")
    return directory, count, command


def run(argv: Sequence[str]) -> int:
    """Hold a slot, run the command, return the exit status to exit with."""
    try:
        directory, count, command = _parse(argv)
    except ValueError as exc:
        sys.stderr.write(f"jitguard-launch: {exc}\n{USAGE}\n")
        return 2

    # A signal while waiting for a slot ends the launcher the default way (nothing runs yet).
    slot = slots.acquire(directory, count)
    assert slot is not None  # no timeout: acquire only returns with a slot
    env = dict(os.environ, JITGUARD_SLOT=str(slot.index))
    try:
        child = subprocess.Popen(command, env=env, pass_fds=(slot.fd,))
    except OSError as exc:
        sys.stderr.write(f"jitguard-launch: cannot run {command[0]}: {exc.strerror or exc}\n")
        return 127

    def forward(signum: int, _frame: object) -> None:
        with contextlib.suppress(ProcessLookupError):
            child.send_signal(signum)

    for sig in _FORWARDED:
        signal.signal(sig, forward)
    status = child.wait()
    slot.release()
    if status >= 0:
        return status
    signum = -status
    name = signal.Signals(signum).name if signum in signal.Signals._value2member_map_ else str(signum)
    if signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        # Die the same way, so ninja sees an interrupted child and stops like it would without us.
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
