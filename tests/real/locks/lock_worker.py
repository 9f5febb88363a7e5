"""A rank that needs a module: take the module lock, build it unless it exists, then load it.

Run by tests/real/locks/test_visible_lock.py as a real process (several at once). The "build" is a stand-in:
a real child process that appends ninja-style ``[k/n]`` lines to the build log, waits for the test's
go-ahead file at step 1, and writes the output atomically at the end. The child dies with this process
(PDEATHSIG), as the runner's build tree does, so a SIGKILLed builder leaves nothing running.

Prints: ``BUILDING <pid>``, ``BUILT``, ``LOADED <content>``, or ``FAILED <codes>`` (exit 1). Log lines of the
lock (who holds it, takeover) go to stderr through jitguard's default handler.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
from pathlib import Path

from jitguard.config import Settings
from jitguard.errors import BuildFailed
from jitguard.locks.visible_lock import ModuleLock

_STANDIN_BUILD = r"""
import os, sys, time
from pathlib import Path
out, log, go, steps = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3]), int(sys.argv[4])
with open(log, "a") as fh:
    for k in range(1, steps + 1):
        fh.write(f"[{k}/{steps}] compile part{k}.cu\n")
        fh.flush()
        if k == 1:
            deadline = time.time() + 120
            while not go.exists() and time.time() < deadline:
                time.sleep(0.05)
        else:
            time.sleep(0.05)
tmp = out.with_name(out.name + f".{os.getpid()}.tmp")
tmp.write_text(f"module built by {os.getppid()}")
os.replace(tmp, out)
"""


def _die_with_parent() -> None:
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def main() -> int:
    workdir = Path(sys.argv[1])
    module = "standin_module"
    output = workdir / f"{module}.so"
    settings = Settings.from_env()
    log_path = workdir / f"build-{os.getpid()}.log"
    lock = ModuleLock(
        workdir / "tmp" / f"{module}.lock",
        module,
        timeout=settings.lock_timeout,
        log_path=log_path,
        report_interval=float(os.environ.get("LOCK_WORKER_REPORT_S", "0.5")),
    )
    try:
        with lock:
            if not output.exists():
                print(f"BUILDING {os.getpid()}", flush=True)
                subprocess.run(
                    [
                        sys.executable,
                        "-c",
                        _STANDIN_BUILD,
                        str(output),
                        str(log_path),
                        str(workdir / "go"),
                        "3",
                    ],
                    check=True,
                    preexec_fn=_die_with_parent,
                )
                print("BUILT", flush=True)
            print(f"LOADED {output.read_text()}", flush=True)
    except BuildFailed as exc:
        print("FAILED " + " ".join(f.code for f in exc.findings), flush=True)
        print(str(exc), file=sys.stderr, flush=True)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
