"""Learned memory per compile job, per module: what one concurrent compile job of a module really needed.

The budget divides the memory it may use by a per-job estimate to pick the parallelism. A fixed default
(5.7 GiB, measured for the GDN SM90 module) is wrong for small modules and may be wrong for future ones, so
the build records what it observed and the next plan uses that. The estimate is the largest of the last few
observations: over-estimating costs some parallelism, under-estimating costs an OOM kill and a retry.

One JSON file per module under ``<cache_dir>/job_memory/``; atomic writes; a corrupt file, or one the cache
dir's trust rules refuse (``jitguard.fileio``), means "nothing learned yet": a record another user planted
must not decide the parallelism of every build.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path

from jitguard import fileio
from jitguard.errors import StateUnwritable

SCHEMA = "jitguard.job-memory/1"
KEEP = 5
# Below this an observation is noise (a no-op ninja run, a link step); it would make the estimate useless.
MIN_OBSERVATION_BYTES = 64 * 1024**2

log = logging.getLogger("jitguard.state")


@dataclass(frozen=True)
class JobMemory:
    module: str
    observations: tuple[int, ...]
    updated: float

    @property
    def estimate(self) -> int:
        return max(self.observations)


class JobMemoryStore:
    """Per-module observed peak bytes per concurrent compile job."""

    def __init__(self, cache_dir: Path) -> None:
        self.cache_dir = Path(cache_dir)
        self.root = self.cache_dir / "job_memory"

    def _path(self, module: str) -> Path:
        return self.root / f"{fileio.safe_name(module)}.json"

    def read(self, module: str) -> JobMemory | None:
        data = fileio.read_json(self._path(module), root=self.cache_dir)
        if data is None or data.get("schema") != SCHEMA or data.get("module") != module:
            return None
        obs = data.get("observations")
        if not isinstance(obs, list) or not obs or not all(isinstance(o, int) and o > 0 for o in obs):
            return None
        updated = data.get("updated")
        return JobMemory(module, tuple(obs), float(updated) if isinstance(updated, (int, float)) else 0.0)

    def estimate(self, module: str) -> int | None:
        """The per-job bytes to plan with for ``module``, or None when nothing was learned yet."""
        learned = self.read(module)
        return learned.estimate if learned else None

    def observe(self, module: str, per_job_bytes: int) -> JobMemory | None:
        """Record one observation (peak bytes of one compile job). Tiny observations are ignored, and one
        that cannot be written (a read-only or full disk) is not remembered: both return None."""
        if per_job_bytes < MIN_OBSERVATION_BYTES:
            return None
        previous = self.read(module)
        kept = ((previous.observations if previous else ()) + (int(per_job_bytes),))[-KEEP:]
        learned = JobMemory(module, kept, time.time())
        record = {"schema": SCHEMA, "module": module, "observations": list(kept), "updated": learned.updated}
        try:
            fileio.write_json(self._path(module), record, root=self.cache_dir)
        except OSError as exc:
            log.info("jitguard: the memory per job of %s is not remembered: %s", module, exc)
            return None
        return learned

    def all(self) -> list[JobMemory]:
        found = []
        for path in fileio.json_files(self.root):
            data = fileio.read_json(path, root=self.cache_dir)
            module = data.get("module") if data else None
            if isinstance(module, str):
                learned = self.read(module)
                if learned:
                    found.append(learned)
        return found

    def clear(self, module: str | None = None) -> int:
        """Forget ``module`` (or every module): whatever is in the way goes, a directory or link included.
        Returns how many went; raises ``StateUnwritable`` naming what could not go."""
        removed, stayed = fileio.remove_each([self._path(module)] if module else fileio.json_files(self.root))
        if stayed:
            raise StateUnwritable("remove learned memory records", self.root, stayed)
        return removed
