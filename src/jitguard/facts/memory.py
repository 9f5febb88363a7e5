"""Memory and CPU limits that bind THIS process: /proc/meminfo, cgroup v2 or v1, CPU affinity and quota.

Available memory is the smaller of MemAvailable and, for every cgroup from this process's up to the root of
the mount, ``limit - working set``. The working set is ``usage - inactive_file``: inactive page cache is
reclaimed before the cgroup OOM killer fires, so counting it as used would make a cache-heavy container look
full (the same definition the kubelet and cAdvisor use). v1 reads ``total_inactive_file`` (hierarchical)
where present.

Every path is a parameter so tests run on fixture trees. Nothing here raises for a missing or odd file: what
could not be read becomes a note and the value stays unknown (``None``).
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from jitguard.config import format_bytes
from jitguard.facts.cgroup import memberships as parse_memberships
from jitguard.facts.cgroup import mounts, read_keyed, read_text, relative_to_root

# cgroup v1 reports "no limit" as PAGE_COUNTER_MAX * page size (0x7FFFFFFFFFFFF000 on 4 KiB pages) or similar
# huge values; anything this large is no limit in practice.
UNLIMITED_THRESHOLD = 1 << 62


@dataclass(frozen=True)
class CgroupLevel:
    """One cgroup on the path from this process's cgroup to the mount root."""

    path: str
    limit: int | None  # None: no limit at this level
    usage: int | None
    inactive_file: int | None

    @property
    def working_set(self) -> int | None:
        if self.usage is None:
            return None
        return max(0, self.usage - (self.inactive_file or 0))

    @property
    def available(self) -> int | None:
        if self.limit is None or self.working_set is None:
            return None
        return max(0, self.limit - self.working_set)


@dataclass(frozen=True)
class MemoryFacts:
    mem_total: int | None
    mem_available: int | None
    cgroup_version: str | None  # "v1", "v2" or None when no memory cgroup is mounted
    cgroup_path: str | None  # the directory this process's memory cgroup maps to
    levels: tuple[CgroupLevel, ...]  # leaf first
    oom_kills: int | None  # OOM kills counted by this process's memory cgroup
    cpu_count: int  # CPUs this process may run on (sched_getaffinity)
    cpu_quota: float | None  # CPUs' worth of time the cgroup quota allows; None: no quota
    notes: tuple[str, ...] = ()

    # Derived in __post_init__ (fields, not properties, so they appear in `doctor --json`).
    cgroup_limit: int | None = field(init=False)  # tightest limit on the path; None: no level limits memory
    cgroup_available: int | None = field(init=False)  # room left at the binding level
    available: int | None = field(init=False)  # min(MemAvailable, every cgroup's limit - working set)
    limited_by: str | None = field(init=False)  # "cgroup" or "meminfo": which source decides `available`
    cpu_limit: int = field(init=False)  # min(affinity, quota rounded up)

    def __post_init__(self) -> None:
        limits = [lv.limit for lv in self.levels if lv.limit is not None]
        level = self.binding_level
        cg = level.available if level is not None else None
        mi = self.mem_available
        known = [v for v in (mi, cg) if v is not None]
        limited_by = (
            None if not known else ("cgroup" if cg is not None and (mi is None or cg < mi) else "meminfo")
        )
        # Quota rounded up: 1.5 CPUs of quota still lets two jobs make progress (they time-share), never 0.
        cpus = max(1, self.cpu_count)
        if self.cpu_quota is not None:
            cpus = max(1, min(cpus, math.ceil(self.cpu_quota)))
        object.__setattr__(self, "cgroup_limit", min(limits) if limits else None)
        object.__setattr__(self, "cgroup_available", cg)
        object.__setattr__(self, "available", min(known) if known else None)
        object.__setattr__(self, "limited_by", limited_by)
        object.__setattr__(self, "cpu_limit", cpus)

    @property
    def binding_level(self) -> CgroupLevel | None:
        """The cgroup level with the least room left (the one whose OOM killer fires first)."""
        limited = [lv for lv in self.levels if lv.available is not None]
        return min(limited, key=lambda lv: lv.available or 0) if limited else None

    def evidence(self) -> tuple[str, ...]:
        """Human-readable lines for findings."""

        def fmt(n: int | None) -> str:
            return "unknown" if n is None else format_bytes(n)

        lines = [f"/proc/meminfo: MemTotal {fmt(self.mem_total)}, MemAvailable {fmt(self.mem_available)}"]
        level = self.binding_level
        if level is not None:
            lines.append(
                f"cgroup {self.cgroup_version} {level.path}: limit {fmt(level.limit)}, "
                f"usage {fmt(level.usage)}, "
                f"inactive_file {fmt(level.inactive_file)}, available {fmt(level.available)}"
            )
        elif self.cgroup_version:
            lines.append(f"cgroup {self.cgroup_version} {self.cgroup_path}: no memory limit")
        quota = "none" if self.cpu_quota is None else f"{self.cpu_quota:g} CPUs"
        lines.append(f"CPUs: affinity {self.cpu_count}, cgroup quota {quota} -> limit {self.cpu_limit}")
        return tuple(lines)


def probe(*, cgroup_root: str | Path = "/sys/fs/cgroup", proc_root: str | Path = "/proc") -> MemoryFacts:
    root = Path(cgroup_root)
    proc = Path(proc_root)
    notes: list[str] = []
    total, avail = _read_meminfo(proc / "meminfo", notes)
    memberships = _read_proc_cgroup(proc / "self" / "cgroup", notes)
    mount_roots = {str(m.point): m.root for m in mounts(proc / "self" / "mountinfo")}

    version: str | None = None
    levels: tuple[CgroupLevel, ...] = ()
    leaf: Path | None = None
    oom: int | None = None
    quota: float | None = None
    if (root / "cgroup.controllers").is_file():
        version = "v2"
        leaf = _locate(root, memberships.get("", "/"), mount_roots, notes)
        levels = tuple(_v2_level(d) for d in _ancestors(leaf, root))
        oom = read_keyed(leaf / "memory.events").get("oom_kill")
        quota = _min_quota(_v2_cpu_quota(d) for d in _ancestors(leaf, root))
    elif (root / "memory" / "memory.limit_in_bytes").is_file():
        version = "v1"
        mem_root = root / "memory"
        leaf = _locate(mem_root, memberships.get("memory", "/"), mount_roots, notes)
        levels = tuple(_v1_level(d) for d in _ancestors(leaf, mem_root))
        oom = read_keyed(leaf / "memory.oom_control").get("oom_kill")
        cpu_root = _v1_cpu_root(root)
        if cpu_root is not None:
            cpu_leaf = _locate(cpu_root, memberships.get("cpu", "/"), mount_roots, notes)
            quota = _min_quota(_v1_cpu_quota(d) for d in _ancestors(cpu_leaf, cpu_root))
    else:
        notes.append(f"no memory cgroup under {root} (neither cgroup v2 nor a v1 memory controller)")

    return MemoryFacts(
        mem_total=total,
        mem_available=avail,
        cgroup_version=version,
        cgroup_path=str(leaf) if leaf is not None else None,
        levels=levels,
        oom_kills=oom,
        cpu_count=_affinity_count(),
        cpu_quota=quota,
        notes=tuple(notes),
    )


def _affinity_count() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        return os.cpu_count() or 1


def _read_meminfo(path: Path, notes: list[str]) -> tuple[int | None, int | None]:
    text = read_text(path)
    if text is None:
        notes.append(f"cannot read {path}")
        return None, None
    values: dict[str, int] = {}
    for line in text.splitlines():
        name, _, rest = line.partition(":")
        parts = rest.split()
        if parts and parts[0].isdigit():
            scale = 1024 if len(parts) > 1 and parts[1].lower() == "kb" else 1
            values[name.strip()] = int(parts[0]) * scale
    return values.get("MemTotal"), values.get("MemAvailable")


def _read_proc_cgroup(path: Path, notes: list[str]) -> dict[str, str]:
    """controller -> path; the v2 entry ("0::/path") is stored under ''."""
    text = read_text(path)
    if text is None:
        notes.append(f"cannot read {path}; using the cgroup root")
        return {}
    return parse_memberships(text)


def _locate(mount: Path, cg_path: str, mount_roots: dict[str, str], notes: list[str]) -> Path:
    """The directory under ``mount`` for this process's cgroup ``cg_path``, else the mount itself."""
    # Inside a container the mount's root is often the container's own cgroup, while /proc/self/cgroup
    # still names the full path; stripping the mount root maps one onto the other.
    relative = relative_to_root(cg_path, mount_roots.get(str(mount), "/"))
    candidate = mount / relative.strip("/")
    if candidate.is_dir():
        return candidate
    if (mount / cg_path.strip("/")).is_dir():
        return mount / cg_path.strip("/")
    notes.append(f"cgroup {cg_path} not found under {mount}; using the mount root (cgroup namespace?)")
    return mount


def _ancestors(leaf: Path, root: Path) -> list[Path]:
    """leaf, its parent, ... up to and including root (leaf must lie under root)."""
    chain = [leaf]
    current = leaf
    while current != root and root in current.parents:
        current = current.parent
        chain.append(current)
    return chain


def _read_int(path: Path) -> int | None:
    text = read_text(path)
    if text is None:
        return None
    text = text.strip()
    return int(text) if text.lstrip("-").isdigit() else None


def _limit(value: int | None) -> int | None:
    if value is None or value < 0 or value >= UNLIMITED_THRESHOLD:
        return None
    return value


def _v2_level(directory: Path) -> CgroupLevel:
    raw = (read_text(directory / "memory.max") or "").strip()
    limit = _limit(int(raw)) if raw.isdigit() else None  # "max" or absent (the root): no limit
    stat = read_keyed(directory / "memory.stat")
    return CgroupLevel(
        path=str(directory),
        limit=limit,
        usage=_read_int(directory / "memory.current"),
        inactive_file=stat.get("inactive_file"),
    )


def _v1_level(directory: Path) -> CgroupLevel:
    stat = read_keyed(directory / "memory.stat")
    inactive = stat.get("total_inactive_file", stat.get("inactive_file"))
    return CgroupLevel(
        path=str(directory),
        limit=_limit(_read_int(directory / "memory.limit_in_bytes")),
        usage=_read_int(directory / "memory.usage_in_bytes"),
        inactive_file=inactive,
    )


def _v1_cpu_root(root: Path) -> Path | None:
    # The cpu controller is mounted alone or co-mounted with cpuacct, under either name order.
    for name in ("cpu", "cpu,cpuacct", "cpuacct,cpu"):
        if (root / name / "cpu.cfs_quota_us").is_file():
            return root / name
    return None


def _v2_cpu_quota(directory: Path) -> float | None:
    parts = (read_text(directory / "cpu.max") or "").split()
    if len(parts) == 2 and parts[0].isdigit() and parts[1].isdigit() and int(parts[1]) > 0:
        return int(parts[0]) / int(parts[1])
    return None  # "max 100000" or absent


def _v1_cpu_quota(directory: Path) -> float | None:
    quota = _read_int(directory / "cpu.cfs_quota_us")
    period = _read_int(directory / "cpu.cfs_period_us")
    if quota is None or period is None or quota <= 0 or period <= 0:
        return None  # -1: no quota
    return quota / period


def _min_quota(values: Iterable[float | None]) -> float | None:
    found = [v for v in values if v is not None]
    return min(found) if found else None
