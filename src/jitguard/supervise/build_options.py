"""What one supervised build is asked to do (``BuildOptions``), how it runs (``JobPlan``, ``BuildRun``) and what it
did (``BuildResult``).

``run_ninja`` (``supervise.runner``) takes the options, decides the run that its attempts (``supervise.attempt``)
read, and returns the result. The options are made from ``JITGUARD_*`` settings by the CLI, the FlashInfer hook
and the prebuild commands; the result is the ``jitguard build`` JSON envelope's body (``to_json``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from jitguard import fileio
from jitguard.config import MemorySpec, Settings
from jitguard.fleet import compiler_cache
from jitguard.supervise import build_time
from jitguard.supervise.progress import Reporter

if TYPE_CHECKING:
    from jitguard.facts import Facts


@dataclass(frozen=True)
class BuildOptions:
    """How to run one build. ``None`` means "decide from the memory budget / the environment"."""

    jobs: int | None = None
    memory_budget: MemorySpec | None = None
    job_memory: int | None = None
    timeout: float = 3600
    stall_timeout: float = 600
    slots_dir: Path | None = None
    lock_timeout: float = 3600  # waiting for another process's build of the same directory
    kill_grace: float = 3.0  # SIGTERM -> SIGKILL when a build is stopped: how long a compile gets to exit
    # Additions beyond the agreed contract, all with defaults:
    progress: str = "auto"  # auto | bar | log | none (see supervise.progress)
    progress_interval: float = 15.0  # seconds between progress log lines
    cache_dir: Path | None = None  # logs, slots and learned job memory; default: jitguard's cache dir
    backend: str = "any"  # the ``backend`` of the findings a failure produces
    ninja: str | None = None  # the ninja executable; default: the one on PATH
    compiler_cache: str | None = None  # auto | sccache | off; default: JITGUARD_COMPILER_CACHE
    # This machine's facts, when the caller has them: a failure's findings then name this machine's fixes
    # (the toolkit that holds libcudart, ...), as pre-flight's findings for the same cause do.
    facts: Facts | None = None

    @classmethod
    def from_settings(cls, settings: Settings, **overrides: Any) -> BuildOptions:
        """Options from JITGUARD_* settings (budget, job memory, timeouts, cache dir), then ``overrides``."""
        base: dict[str, Any] = {
            "memory_budget": settings.memory_budget,
            "job_memory": settings.job_memory,
            "timeout": settings.build_timeout,
            "stall_timeout": settings.stall_timeout,
            "lock_timeout": settings.lock_timeout,
            "cache_dir": settings.cache_dir,
            "compiler_cache": settings.compiler_cache,
        }
        base.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**base)


@dataclass(frozen=True)
class JobPlan:
    """How many jobs a build runs with, and why: planned once from the memory budget."""

    jobs: int
    budget_bytes: int | None
    job_memory: int | None
    reason: str


@dataclass(frozen=True)
class BuildRun:
    """What every step of one build needs: decided once in ``run_ninja``, read by the attempts."""

    module: str
    build_dir: Path
    ninja_file: Path
    ninja: str
    plan: JobPlan
    options: BuildOptions
    slots_dir: Path
    log: fileio.LogFile
    log_path: Path
    cache_dir: Path
    reporter: Reporter
    started: float
    keep_fds: Sequence[int] = ()  # open in the keeper of every attempt (the build lock)
    compiler_cache: compiler_cache.Session | None = None  # the build's sccache, when it uses one
    foreseen: build_time.Foreseen | None = None  # what the last build of the module here says of this one

    @property
    def learned(self) -> build_time.BuildDuration | None:
        return self.foreseen.learned if self.foreseen else None


@dataclass(frozen=True)
class BuildResult:
    """A finished build. ``attempts`` is 0 when ninja had nothing to do."""

    module: str
    log_path: Path
    jobs: int
    attempts: int
    wall_s: float
    peak_rss_bytes: int
    # Additions beyond the agreed contract:
    budget_bytes: int | None = None
    job_memory: int | None = None
    peak_job_rss_bytes: int = 0
    plan_reason: str = ""
    compiler_cache: compiler_cache.CacheStats | None = None  # what sccache did, when the build used it

    def to_json(self) -> dict[str, Any]:
        return {
            "module": self.module,
            "log_path": str(self.log_path),
            "jobs": self.jobs,
            "attempts": self.attempts,
            "wall_s": round(self.wall_s, 3),
            "peak_rss_bytes": self.peak_rss_bytes,
            "budget_bytes": self.budget_bytes,
            "job_memory": self.job_memory,
            "peak_job_rss_bytes": self.peak_job_rss_bytes,
            "plan_reason": self.plan_reason,
            "compiler_cache": self.compiler_cache.to_json() if self.compiler_cache else None,
        }
