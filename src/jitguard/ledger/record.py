"""The start ledger as plain data: per JIT layer what one process compiled, loaded from its cache or got from
the store, and the seconds it took; jitguard's own seconds by phase; the warm snapshot that covered the start
and the compiles it should have spared (must-hit misses).

Pure: no files, no hooks. One ``ProcessRecord`` per process; the processes of one engine start (vLLM's API
server, its EngineCore, each worker) share a start id, and ``merge`` joins their records into one
``StartRecord`` by summing what each counted.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

FILE_SCHEMA = "jitguard.start/1"


@dataclass(frozen=True)
class Layer:
    """One JIT layer: its title and the warm snapshot's cache layer that holds its files (``facts.jit_caches``
    names; ``engine`` for the torch.compile cache of the engine that runs, None where no snapshot holds it)."""

    title: str
    cache: str | None


LAYERS: dict[str, Layer] = {
    "flashinfer-nvcc": Layer("FlashInfer nvcc modules", "flashinfer"),
    "cutedsl": Layer("CuTeDSL kernels (FlashInfer's, kept by jitguard)", "jitguard"),
    "triton": Layer("Triton kernels", "triton"),
    "triton-autotune": Layer("Triton autotune runs", "triton"),
    "inductor": Layer("Inductor FX graphs", "inductor"),
    "torch-compile": Layer("the engine's torch.compile", "engine"),
    "deep-gemm": Layer("DeepGEMM kernels", "deep_gemm"),
    "tilelang": Layer("TileLang kernels", "tilelang"),
}
PHASES = ("import", "facts", "verdict", "restore", "lock_waits", "save")
OUTCOMES = ("compiled", "cached", "restored")  # what one event of a layer was
MAX_EXAMPLES = 5  # names of what compiled, per layer
MAX_MISSES = 50


@dataclass(frozen=True)
class LayerCounts:
    """One layer in one process: ``compiled`` (built here), ``cached`` (loaded from the tool's own cache),
    ``restored`` (fetched from jitguard's store during this start), ``seconds`` spent, ``after_ready`` (compiled
    after the engine said it was ready: a first request's JIT) and the first names that compiled."""

    compiled: int = 0
    cached: int = 0
    restored: int = 0
    seconds: float = 0.0
    after_ready: int = 0
    examples: tuple[str, ...] = ()

    @property
    def active(self) -> bool:
        return bool(self.compiled or self.cached or self.restored)

    def add(self, other: LayerCounts) -> LayerCounts:
        return LayerCounts(
            self.compiled + other.compiled,
            self.cached + other.cached,
            self.restored + other.restored,
            self.seconds + other.seconds,
            self.after_ready + other.after_ready,
            _first(self.examples + other.examples, MAX_EXAMPLES),
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "compiled": self.compiled,
            "cached": self.cached,
            "restored": self.restored,
            "seconds": round(self.seconds, 3),
            "after_ready": self.after_ready,
            "examples": list(self.examples),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> LayerCounts:
        return cls(
            _count(data.get("compiled")),
            _count(data.get("cached")),
            _count(data.get("restored")),
            _seconds(data.get("seconds")),
            _count(data.get("after_ready")),
            tuple(str(x) for x in data.get("examples") or () if isinstance(x, str))[:MAX_EXAMPLES],
        )


@dataclass(frozen=True)
class Miss:
    """A compile in a layer the start's warm snapshot covers: what compiled and why, as far as the tool says."""

    layer: str
    what: str
    cause: str

    def to_json(self) -> dict[str, str]:
        return {"layer": self.layer, "what": self.what, "cause": self.cause}


@dataclass(frozen=True)
class Warm:
    """The warm snapshot of this start: ``mode`` (JITGUARD_WARM), ``outcome`` (restored, present, miss, ...;
    ``none`` without one), the snapshot ``name`` and the ledger layers it ``covered``."""

    mode: str = "auto"
    outcome: str = "none"
    name: str = ""
    covered: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {"mode": self.mode, "outcome": self.outcome, "name": self.name, "covered": list(self.covered)}


@dataclass(frozen=True)
class ProcessRecord:
    """What one process of an engine start recorded (``role``: ``engine-core``, ``worker``, ``server``, ...)."""

    start_id: str
    pid: int
    engine: str
    role: str
    started_at: float  # unix time when jitguard began recording in this process
    ready_at: float | None = None
    layers: Mapping[str, LayerCounts] = field(default_factory=dict)
    phases: Mapping[str, float] = field(default_factory=dict)
    warm: Warm = Warm()
    misses: tuple[Miss, ...] = ()
    notes: tuple[str, ...] = ()

    @property
    def ready_after_s(self) -> float | None:
        return None if self.ready_at is None else max(0.0, self.ready_at - self.started_at)

    def to_json(self, version: str) -> dict[str, Any]:
        """The record as its file holds it (``jitguard.start/1``)."""
        return {
            "schema": FILE_SCHEMA,
            "jitguard": version,
            "start_id": self.start_id,
            "pid": self.pid,
            "engine": self.engine,
            "role": self.role,
            "started_at": round(self.started_at, 3),
            "ready_at": None if self.ready_at is None else round(self.ready_at, 3),
            "ready_after_s": None if self.ready_after_s is None else round(self.ready_after_s, 3),
            "layers": {name: counts.to_json() for name, counts in self.layers.items()},
            "phases": {name: round(s, 3) for name, s in self.phases.items()},
            "warm": self.warm.to_json(),
            "misses": [m.to_json() for m in self.misses],
            "notes": list(self.notes),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ProcessRecord | None:
        """The record in ``data``, or None when it is not one (a damaged or foreign file is left out)."""
        if data.get("schema") != FILE_SCHEMA or not isinstance(data.get("start_id"), str):
            return None
        layers = _mapping(data.get("layers"))
        phases = _mapping(data.get("phases"))
        warm = _mapping(data.get("warm"))
        misses = data.get("misses")
        misses = misses if isinstance(misses, list) else []
        ready = data.get("ready_at")
        return cls(
            start_id=data["start_id"],
            pid=_count(data.get("pid")),
            engine=str(data.get("engine") or ""),
            role=str(data.get("role") or ""),
            started_at=_seconds(data.get("started_at")),
            ready_at=_seconds(ready) if isinstance(ready, (int, float)) else None,
            layers={
                str(k): LayerCounts.from_json(v)
                for k, v in layers.items()
                if k in LAYERS and isinstance(v, dict)
            },
            phases={str(k): _seconds(v) for k, v in phases.items() if k in PHASES},
            warm=Warm(
                str(warm.get("mode") or "auto"),
                str(warm.get("outcome") or "none"),
                str(warm.get("name") or ""),
                tuple(str(x) for x in warm.get("covered") or () if x in LAYERS),
            ),
            misses=tuple(
                Miss(str(m.get("layer", "")), str(m.get("what", "")), str(m.get("cause", "")))
                for m in misses
                if isinstance(m, dict)
            )[:MAX_MISSES],
            notes=tuple(str(n) for n in data.get("notes") or () if isinstance(n, str)),
        )


@dataclass(frozen=True)
class StartRecord:
    """One engine start: every process's record of one start id, joined."""

    start_id: str
    processes: tuple[ProcessRecord, ...]

    @property
    def started_at(self) -> float:
        return min(p.started_at for p in self.processes)

    @property
    def ready_at(self) -> float | None:
        ready = [p.ready_at for p in self.processes if p.ready_at is not None]
        return max(ready) if ready else None

    @property
    def ready_after_s(self) -> float | None:
        return None if self.ready_at is None else max(0.0, self.ready_at - self.started_at)

    @property
    def engine(self) -> str:
        return next((p.engine for p in self.processes if p.engine), "")

    @property
    def layers(self) -> dict[str, LayerCounts]:
        total: dict[str, LayerCounts] = {}
        for process in self.processes:
            for name, counts in process.layers.items():
                total[name] = total.get(name, LayerCounts()).add(counts)
        return {name: total[name] for name in LAYERS if name in total}

    @property
    def phases(self) -> dict[str, float]:
        total: dict[str, float] = {}
        for process in self.processes:
            for name, seconds in process.phases.items():
                total[name] = total.get(name, 0.0) + seconds
        return {name: total[name] for name in PHASES if name in total}

    @property
    def warm(self) -> Warm:
        """The snapshot's: the outcome of the process that restored it, else the first one's; covered: all."""
        rank = {"restored": 0, "partial": 1, "present": 2}
        warms = sorted((p.warm for p in self.processes), key=lambda w: rank.get(w.outcome, 9))
        if not warms:
            return Warm()
        covered = {layer for w in warms for layer in w.covered}
        return replace(warms[0], covered=tuple(name for name in LAYERS if name in covered))

    @property
    def misses(self) -> tuple[Miss, ...]:
        return tuple(m for p in self.processes for m in p.misses)[:MAX_MISSES]

    def to_json(self) -> dict[str, Any]:
        return {
            "start_id": self.start_id,
            "engine": self.engine,
            "started_at": round(self.started_at, 3),
            "ready_after_s": None if self.ready_after_s is None else round(self.ready_after_s, 3),
            "layers": {name: counts.to_json() for name, counts in self.layers.items()},
            "phases": {name: round(s, 3) for name, s in self.phases.items()},
            "jitguard_s": round(sum(self.phases.values()), 3),
            "warm": self.warm.to_json(),
            "misses": [m.to_json() for m in self.misses],
            "covered_compiles": covered_compiles(self),
            "processes": [
                {
                    "pid": p.pid,
                    "role": p.role,
                    "ready_after_s": None if p.ready_after_s is None else round(p.ready_after_s, 3),
                }
                for p in self.processes
            ],
        }


def merge(records: Iterable[ProcessRecord]) -> list[StartRecord]:
    """The records joined by start id, each start's processes in the order they began, newest start first."""
    by_start: dict[str, list[ProcessRecord]] = {}
    for record in records:
        by_start.setdefault(record.start_id, []).append(record)
    starts = [
        StartRecord(start_id, tuple(sorted(group, key=lambda p: (p.started_at, p.pid))))
        for start_id, group in by_start.items()
    ]
    return sorted(starts, key=lambda s: s.started_at, reverse=True)


def covered_layers(
    restored: Iterable[str], roots: Mapping[str, str], engine: str, *, within: Any = None
) -> tuple[str, ...]:
    """The ledger layers a snapshot of the cache layers ``restored`` covers: a layer whose cache lies in a
    restored cache's directory (``roots``: cache layer -> its directory here; Triton's kernels inside
    Inductor's when TRITON_CACHE_DIR is unset count as Inductor's). ``within(path, outer)`` says whether a
    directory lies in another (default: the path is the other or under it)."""
    inside = within or (lambda path, outer: path == outer or path.startswith(outer.rstrip("/") + "/"))
    restored_roots = [roots[name] for name in restored if name in roots]
    covered = []
    for name, layer in LAYERS.items():
        cache = engine if layer.cache == "engine" else layer.cache
        if cache is None:
            continue
        root = roots.get(cache)
        if cache in restored or (root is not None and any(inside(root, outer) for outer in restored_roots)):
            covered.append(name)
    return tuple(covered)


def covered_compiles(start: StartRecord) -> dict[str, int]:
    """Per layer the warm snapshot covered, how many things compiled in it during the start (before ready and
    after): must-hit's measure. Empty when nothing covered compiled."""
    layers = start.layers
    return {
        name: layers[name].compiled for name in start.warm.covered if name in layers and layers[name].compiled
    }


def summary_line(record: ProcessRecord | StartRecord) -> str:
    """The ledger in one line, for the engine log at ready."""
    parts = []
    for name, counts in record.layers.items():
        if not counts.active:
            continue
        said = [f"{n} {what}" for n, what in ((counts.compiled, "compiled"), (counts.cached, "cached")) if n]
        if counts.restored:
            said.append(f"{counts.restored} from the store")
        parts.append(f"{name} {', '.join(said)} ({counts.seconds:.1f} s)")
    phases = record.phases
    own = sum(phases.values())
    jitguard = f"jitguard {own:.2f} s" + (
        " (" + ", ".join(f"{k} {v:.2f}" for k, v in phases.items() if v >= 0.005) + ")"
        if own >= 0.005
        else ""
    )
    warm = record.warm
    line = "start ledger: " + ("; ".join(parts) or "nothing compiled or loaded") + f"; {jitguard}"
    if warm.outcome != "none":
        line += f"; warm snapshot {warm.outcome}"
        if warm.covered and warm.mode == "require":
            line += f", {len(record.misses)} must-hit misses"
    ready = record.ready_after_s
    if ready is not None:
        line += f"; ready {ready:.1f} s after jitguard's start"
    return line


def _first(items: Sequence[str], n: int) -> tuple[str, ...]:
    seen: list[str] = []
    for item in items:
        if item not in seen:
            seen.append(item)
        if len(seen) == n:
            break
    return tuple(seen)


def _mapping(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, dict) else {}


def _count(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


def _seconds(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return 0.0
    return max(0.0, float(value))
