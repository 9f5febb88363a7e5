"""Prepare the build.ninja the runner runs: the same build, every rule's command behind the slot launcher.

ninja's manifest is line based: a ``rule NAME`` line starts a block of indented ``key = value`` bindings. Each
``command =`` binding inside a rule block becomes ``command = $jitguard_launch <original>``, and the file
ends with the definition of ``jitguard_launch`` (``python -m jitguard.supervise.launcher --``; the slots
directory and count travel in the environment, so the command line is the same for every attempt and ninja
keeps what an earlier attempt finished). ninja expands rule commands only when it runs them, so a definition
at the end serves every rule, and every line of the user's file keeps its number in the copy. A ``$nvcc`` or ``$cxx`` at the start of a command (FlashInfer's
generated files) is covered like any other command, so the rewrite works for any ninja project. Rules in
``include``d or ``subninja`` files are not rewritten; their commands run without a slot.

The copy is written next to the log (never over the original). Output paths are unchanged and ninja runs in
the original build directory. ninja records a hash of each command line, so an object built by plain ``ninja``
would count as out of date for the wrapped manifest and the other way round: ``supervise.ninja_log`` records each
finished object for both command lines, and the runner first asks the original manifest whether there is
anything to do at all (``nothing_to_do``). ``up_to_date`` asks the same and turns a manifest ninja cannot load
into a ``UsageError`` that names the user's file and line (never the copy's).

Why a rewritten copy rather than leaving ninja's files alone (measured in ``benchmarks/compile_slots.py``,
``benchmarks/results/compile_slots_*.md``):

- A GNU make jobserver does not hold the budget. ninja joins one only from 1.13 (distributions ship 1.10-1.12),
  and ignores it when given ``-j``, so the memory plan's jobs per build cannot apply; every client runs one job
  on its implicit slot, so B builds run B jobs beyond the pool's tokens; tokens are anonymous bytes: those of a
  SIGKILLed ninja are gone for good, and a waiting build can neither name who holds the pool nor reclaim what
  a dead build left (``tests/faults/test_compile_slots.py``).
- Reserving slots per build before ninja starts (``ninja -j N`` with N slots held) keeps the count, but fixes a
  build's parallelism when it starts (slots freed later by other builds stay unused by it; slots it reserved idle
  through its link and tail), and drops what the command prefix also carries: the compiler cache (``sccache
  <compiler>``: FlashInfer runs nvcc by its toolkit's path, ``$cuda_home/bin/nvcc``, so nothing but the command
  line can put sccache in front), the "killed by signal" line that ninja never prints (``supervise.oom``), and the kill grace and
  parent-death signal of each compile (``supervise.launcher``).
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
