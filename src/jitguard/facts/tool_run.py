"""One short run of a build tool for a probe (a trial link, a C-stub build): bounded in time, its output
merged and cut to the tail, never an exception: a tool that cannot start or does not finish is an outcome."""

from __future__ import annotations

import shlex
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass

OUTPUT_LIMIT = 4000  # characters of output kept: the tail, where compilers and linkers say what failed


@dataclass(frozen=True)
class ToolRun:
    """``returncode`` None: the tool did not finish, or (``started`` False) could not be started at all;
    ``output`` is then why."""

    returncode: int | None
    output: str
    started: bool = True


def run_tool(argv: list[str], env: Mapping[str, str], cwd: str, *, timeout: float) -> ToolRun:
    """The exit status and the tail of stdout and stderr together."""
    try:
        proc = subprocess.run(
            argv,
            env=dict(env),
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return ToolRun(None, f"`{shlex.join(argv)}` did not finish within {timeout:g} s")
    except OSError as exc:
        return ToolRun(None, f"`{shlex.join(argv)}` could not run: {exc.strerror or exc}", started=False)
    return ToolRun(proc.returncode, proc.stdout.decode(errors="replace")[-OUTPUT_LIMIT:])
