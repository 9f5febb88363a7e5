"""One real import of a module, in a fresh interpreter, reporting the original exception.

Used where the exception itself is the fact (the CuTeDSL era swallows kernel import errors; ``doctor --deep``
and the GDN resolver name the cause): importing FlashInfer or a CuTeDSL kernel can take seconds, initialise
CUDA or crash the interpreter, none of which may happen to the caller. Too slow for ``collect()``.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class ImportProbe:
    module: str
    ok: bool
    error_type: str | None  # e.g. "ImportError", "RuntimeError", "Timeout", "Crash"
    error_message: str | None
    traceback_tail: str | None
    seconds: float


_PROBE_SCRIPT = r"""
import json, sys, time, traceback
start = time.perf_counter()
result = {"ok": True, "error_type": None, "error_message": None, "traceback_tail": None}
try:
    __import__(sys.argv[1])
except BaseException as exc:  # report everything, SystemExit included
    tail = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)).splitlines()[-25:]
    result = {"ok": False, "error_type": type(exc).__name__, "error_message": str(exc),
              "traceback_tail": "\n".join(tail)}
result["seconds"] = time.perf_counter() - start
sys.stdout.flush()
print("\n@@JITGUARD-IMPORT-PROBE@@" + json.dumps(result))
"""


def probe_import(module: str, *, timeout: float = 60, env: Mapping[str, str] | None = None) -> ImportProbe:
    """Import ``module`` in a fresh interpreter and report the original exception, if any.

    A subprocess because importing FlashInfer or a CuTeDSL kernel can take seconds, initialise CUDA, or crash
    the interpreter; none of that may happen to the caller. Runs from / so no local directory shadows a
    package.
    """
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*", module):
        raise ValueError(f"not a module name: {module!r}")
    start = time.perf_counter()
    try:
        proc = subprocess.run(
            [sys.executable, "-c", _PROBE_SCRIPT, module],
            env=dict(os.environ if env is None else env),
            cwd="/",
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired:
        return ImportProbe(
            module,
            False,
            "Timeout",
            f"import {module} did not finish in {timeout:g} s",
            None,
            time.perf_counter() - start,
        )
    elapsed = time.perf_counter() - start
    marker = "@@JITGUARD-IMPORT-PROBE@@"
    if marker in proc.stdout:
        # The report is one line; what follows it (an atexit handler of the imported package) is not ours.
        data = json.loads(proc.stdout.rsplit(marker, 1)[1].partition("\n")[0])
        return ImportProbe(
            module,
            bool(data["ok"]),
            data["error_type"],
            data["error_message"],
            data["traceback_tail"],
            float(data["seconds"]),
        )
    # The interpreter died before reporting (segfault, abort, os._exit during import).
    tail = "\n".join((proc.stderr or proc.stdout).splitlines()[-25:])
    return ImportProbe(
        module,
        False,
        "Crash",
        f"the interpreter exited with status {proc.returncode} while importing {module}",
        tail or None,
        elapsed,
    )
