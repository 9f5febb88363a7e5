"""Learned build durations per module and host: how long the last supervised build of a module took here.

A cold JIT build can outlast an engine's wait for its workers (vLLM's ``VLLM_ENGINE_READY_TIMEOUT_S``), and a
person tailing a server log wants to know how long the silence lasts. The build records its wall time, its
number of compile steps (ninja's ``[k/n]`` total) and its jobs, so the next build of the module can say how
long it will take before it starts, and how long is left while it runs.

One JSON file per module and host under ``<cache_dir>/build_durations/``; atomic writes. A record names its
host: a shared cache dir's record from another machine (other CPUs, other GPUs) is not this machine's
duration. A corrupt file, another host's record, or one the cache dir's trust rules refuse
(``jitguard.fileio``), means "nothing learned yet".
"""

from __future__ import annotations

import logging
import math
import socket
import time
from dataclasses import dataclass
from pathlib import Path

from jitguard import fileio

SCHEMA = "jitguard.build-duration/1"

log = logging.getLogger("jitguard.state")


def host_identity() -> str:
    """This machine, as records name it."""
    return socket.gethostname() or "localhost"


@dataclass(frozen=True)
class BuildDuration:
    """One finished build: ``wall_s`` seconds for ``steps`` compile steps with ``jobs`` parallel jobs."""

    module: str
    host: str
    wall_s: float
    steps: int
    jobs: int
    updated: float

    def seconds_for(self, steps: int, jobs: int) -> float:
        """The time ``steps`` steps take with ``jobs`` jobs, scaled from this build (parallelism beyond the
        steps there are does not help)."""
        per_step = self.wall_s / self.steps
        speedup = min(self.jobs, self.steps) / max(1, min(jobs, steps))
        return per_step * steps * speedup


class BuildDurationStore:
    """Per-module, per-host wall time of the last successful supervised build."""

    def __init__(self, cache_dir: Path, host: str | None = None) -> None:
        self.cache_dir = Path(cache_dir)
        self.root = self.cache_dir / "build_durations"
        self.host = host or host_identity()

    def _path(self, module: str) -> Path:
        return self.root / f"{fileio.safe_name(module)}@{fileio.safe_name(self.host)}.json"

    def read(self, module: str) -> BuildDuration | None:
        data = fileio.read_json(self._path(module), root=self.cache_dir)
        if data is None or data.get("schema") != SCHEMA:
            return None
        if data.get("module") != module or data.get("host") != self.host:
            return None
        wall, steps, jobs = _number(data.get("wall_s")), _count(data.get("steps")), _count(data.get("jobs"))
        if wall is None or steps is None or jobs is None:
            return None
        return BuildDuration(module, self.host, wall, steps, jobs, _number(data.get("updated")) or 0.0)

    def record(self, module: str, *, wall_s: float, steps: int, jobs: int) -> BuildDuration | None:
        """Remember one successful build. A build with no steps, or a record that cannot be written (a
        read-only or full disk), is not remembered: both return None."""
        if steps < 1 or jobs < 1 or not wall_s > 0 or not math.isfinite(wall_s):
            return None
        learned = BuildDuration(module, self.host, float(wall_s), int(steps), int(jobs), time.time())
        record = {
            "schema": SCHEMA,
            "module": module,
            "host": self.host,
            "wall_s": round(learned.wall_s, 3),
            "steps": learned.steps,
            "jobs": learned.jobs,
            "updated": learned.updated,
        }
        try:
            fileio.write_json(self._path(module), record, root=self.cache_dir)
        except OSError as exc:
            log.info("jitguard: the build duration of %s is not remembered: %s", module, exc)
            return None
        return learned


def _number(value: object) -> float | None:
    """``value`` when it is a positive finite number, else None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) and value > 0 else None


def _count(value: object) -> int | None:
    """``value`` when it is a positive integer, else None."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None
