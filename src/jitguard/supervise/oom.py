"""What the runner itself observes about out-of-memory kills during one build attempt.

ninja does not report that a child died by a signal, and nvcc survives when its cicc is killed, so the runner
combines what it can see: the launcher's "killed by signal 9" line, the compilers' own words for a kill or a
failed allocation, ninja's own exit by SIGKILL, and the ``oom_kill`` counters of every memory cgroup a process
of the build lived in (cgroup v1 ``memory.oom_control``, v2 ``memory.events``), compared before and after.
cgroup v1 does not propagate the counter to parents, hence "every cgroup the build's processes were seen in".
The host-wide ``/proc/vmstat`` counter is kept as evidence only: another process's OOM kill must not turn an
ordinary compile error into an OOM verdict.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from jitguard.facts.cgroup import memberships, mounts, read_keyed, read_text
from jitguard.findings.classify import OOM_TEXT
from jitguard.supervise.launcher import KILLED_MARKER

_TEXT = re.compile(re.escape(KILLED_MARKER) + r" 9\b|" + OOM_TEXT.pattern, OOM_TEXT.flags)
_MAX_EVIDENCE = 6


def text_evidence(log_text: str) -> list[str]:
    """Lines of ``log_text`` that say a job was killed or could not allocate memory."""
    found: list[str] = []
    for line in log_text.splitlines():
        if _TEXT.search(line) and line.strip() not in found:
            found.append(line.strip())
            if len(found) >= _MAX_EVIDENCE:
                break
    return found


@dataclass
class OomCounters:
    """``oom_kill`` counters of the memory cgroups a build's processes were seen in, first value vs. now."""

    proc: Path = Path("/proc")
    baseline: dict[Path, int] = field(default_factory=dict)
    vmstat_baseline: int | None = None

    def __post_init__(self) -> None:
        found = mounts(self.proc / "self" / "mountinfo")
        self._v1 = [m for m in found if m.version == "v1" and "memory" in m.controllers]
        self._v2 = next((m for m in found if m.version == "v2"), None)
        self.vmstat_baseline = self._vmstat()

    def _vmstat(self) -> int | None:
        return read_keyed(self.proc / "vmstat").get("oom_kill")

    def _counter_files(self, pid: int | str) -> list[Path]:
        member = memberships(read_text(self.proc / str(pid) / "cgroup") or "")
        files: list[Path] = []
        if "" in member and self._v2 is not None:
            files.append(self._v2.point / member[""].strip("/") / "memory.events")
        if "memory" in member:
            files += [m.directory(member["memory"]) / "memory.oom_control" for m in self._v1]
        return [f for f in files if f.is_file()]

    def watch(self, pids: Iterable[int] | str = "self") -> None:
        """Start watching the cgroups of ``pids`` (their counters now are the baseline)."""
        for pid in [pids] if isinstance(pids, str) else pids:
            for path in self._counter_files(pid):
                if path not in self.baseline:
                    value = read_keyed(path).get("oom_kill")
                    if value is not None:
                        self.baseline[path] = value

    def kills(self) -> list[str]:
        """Evidence lines for every watched cgroup whose oom_kill counter grew."""
        lines = []
        for path, before in self.baseline.items():
            now = read_keyed(path).get("oom_kill")
            if now is not None and now > before:
                lines.append(
                    f"{path}: oom_kill {before} -> {now} (the kernel killed {now - before} process(es))"
                )
        return lines

    def host_kills(self) -> str | None:
        now = self._vmstat()
        if now is None or self.vmstat_baseline is None or now <= self.vmstat_baseline:
            return None
        return f"/proc/vmstat: oom_kill {self.vmstat_baseline} -> {now} during the build (host-wide)"

    def reset(self) -> None:
        """New baselines for the next attempt."""
        for path in list(self.baseline):
            value = read_keyed(path).get("oom_kill")
            if value is not None:
                self.baseline[path] = value
        self.vmstat_baseline = self._vmstat()
