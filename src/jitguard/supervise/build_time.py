"""The time a supervised build is foreseen to take, and remembering the time it took.

Before a build: the duration learned for the module on this host (``state.build_durations``), scaled to the
jobs of this build, and the warning when that outlasts the engine's wait for it (``decision.engine_wait``).
After a successful build: its wall time, steps and jobs, for the next one. Both are best effort: a cache
that cannot be read or written costs the estimate, never the build.
"""

from __future__ import annotations

import contextlib
import os
import sys
from dataclasses import dataclass
from pathlib import Path

from jitguard.decision.engine_wait import ready_timeout_warning
from jitguard.state.build_durations import BuildDuration, BuildDurationStore


@dataclass(frozen=True)
class Foreseen:
    """What the last build of the module here says about this one."""

    learned: BuildDuration | None
    estimate_s: float | None
    warning: str | None  # the engine may give up before the build ends: what to do


def foresee(cache_dir: Path, module: str, jobs: int) -> Foreseen:
    learned = None
    with contextlib.suppress(Exception):  # a learned duration is a help, never a reason to fail
        learned = BuildDurationStore(cache_dir).read(module)
    estimate = learned.seconds_for(learned.steps, jobs) if learned else None
    # vLLM's wait applies with its default when vLLM is the process building (a JIT build in its engine).
    warning = ready_timeout_warning(module, estimate, os.environ, in_vllm="vllm" in sys.modules)
    return Foreseen(learned, estimate, warning)


def remember(cache_dir: Path, module: str, *, wall_s: float, steps: int, jobs: int) -> None:
    with contextlib.suppress(Exception):  # learning is best effort; a read-only cache must not fail a build
        BuildDurationStore(cache_dir).record(module, wall_s=wall_s, steps=steps, jobs=jobs)
