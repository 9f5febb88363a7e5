"""The build.ninja the runner runs: the same build, every rule's command behind the slot launcher.

A copy next to the log (never the original; every line keeps its number), ending with the definition of
``$jitguard_launch``; the slots travel in the environment, so the command line, and what ninja counts as
built, is the same for every attempt. A copy rather than a GNU make jobserver or slots reserved per build:
only a command prefix holds the budget across ninja versions and ``-j``, frees a dead build's slots, and
carries sccache, the "killed by signal" line and each compile's kill grace (docs/design.md "Memory budget";
measured in ``benchmarks/results/compile_slots_*.md``).
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from jitguard.errors import UsageError
from jitguard.fileio import write_atomic

LAUNCH_VARIABLE = "jitguard_launch"
_RULE = re.compile(r"^rule\s+\S+")
_COMMAND = re.compile(r"^(\s+command\s*=\s*)(.*)$")
# "ninja: error: /p/build.ninja:4: expected '=', got identifier", then the line and a "^ near here" marker.
_LOAD_ERROR = re.compile(r"^ninja: error: (?P<file>.+?):(?P<line>\d+): (?P<message>.*)$", re.MULTILINE)


def launcher_prefix(*, python: str | None = None) -> list[str]:
    """The argv prefix that runs a command under a host-wide slot (directory and count come from the
    environment, see ``supervise.launcher``, so the prefix and thus ninja's view of the command never change)."""
    return [python or sys.executable, "-m", "jitguard.supervise.launcher", "--"]


def _ninja_escape(text: str) -> str:
    # In a ninja variable value only '$' is special (and a newline, which a path cannot sensibly hold).
    return text.replace("$", "$$")


def wrap_commands(text: str, prefix: Sequence[str]) -> tuple[str, int]:
    """``text`` with every rule command behind ``prefix``; returns the new text and the number of rules."""
    out = []
    in_rule = False
    wrapped = 0
    continued = False
    for line in text.splitlines():
        if continued:
            # The previous line ended with '$' (ninja's line continuation): this line belongs to it.
            out.append(line)
            continued = line.endswith("$") and not line.endswith("$$")
            continue
        if line and not line[0].isspace():
            in_rule = bool(_RULE.match(line))
        elif in_rule:
            match = _COMMAND.match(line)
            if match:
                line = f"{match.group(1)}${LAUNCH_VARIABLE} {match.group(2)}"
                wrapped += 1
        out.append(line)
        continued = line.endswith("$") and not line.endswith("$$")
    # A blank line first ends a trailing '$' continuation of the user's last line.
    out += ["", f"{LAUNCH_VARIABLE} = " + _ninja_escape(shlex.join(prefix))]
    return "\n".join(out) + "\n", wrapped


def write_wrapped(original: Path, destination: Path, prefix: Sequence[str]) -> int:
    """Write the wrapped copy of ``original`` to ``destination``; returns the number of rules wrapped."""
    # ninja reads bytes: a file that is not UTF-8 (a Latin-1 path, a stray byte) is copied byte for byte, and
    # ninja itself then reports whatever is wrong with it.
    text, wrapped = wrap_commands(Path(original).read_text("utf-8", "surrogateescape"), prefix)
    # Replaced atomically, never written through a link planted at the destination.
    write_atomic(destination, text.encode("utf-8", "surrogateescape"))
    return wrapped


def _dry_run(
    ninja: str, build_dir: Path, manifest: Path, timeout: float
) -> subprocess.CompletedProcess[str] | None:
    try:
        return subprocess.run(
            [ninja, "-n", "-C", str(build_dir), "-f", str(Path(manifest).resolve())],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            errors="replace",
            timeout=timeout,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None


def nothing_to_do(ninja: str, build_dir: Path, manifest: Path, *, timeout: float = 60.0) -> bool:
    """True when ``ninja -n`` on the original manifest has no work (everything is up to date)."""
    proc = _dry_run(ninja, build_dir, manifest, timeout)
    return proc is not None and proc.returncode == 0 and "no work to do" in proc.stdout


def up_to_date(ninja: str, build_dir: Path, manifest: Path, *, timeout: float = 60.0) -> bool:
    """``nothing_to_do``, and a ``UsageError`` naming the file and line when ninja cannot load the manifest."""
    proc = _dry_run(ninja, build_dir, manifest, timeout)
    if proc is None:
        return False
    error = _LOAD_ERROR.search(proc.stderr) if proc.returncode != 0 else None
    if error is not None:
        context = [line for line in proc.stderr[error.end() :].splitlines() if line.strip()][:2]
        shown = "".join(f"\n    {line}" for line in context)
        raise UsageError(
            f"{error['file']}:{error['line']}: ninja cannot read this build file: {error['message']}{shown}\n"
            f"Fix line {error['line']} of {error['file']} and run again."
        )
    return proc.returncode == 0 and "no work to do" in proc.stdout
