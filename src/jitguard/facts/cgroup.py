"""The cgroup file formats, read once for everyone: which cgroups a process is in (``/proc/<pid>/cgroup``),
where the hierarchies are mounted (``/proc/self/mountinfo``), and the ``name value`` files (``memory.stat``,
``memory.events``, ``memory.oom_control``). The memory facts and the build's OOM watch both use them.

Nothing here raises for a missing or odd file: what cannot be read is empty.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class CgroupMount:
    """One cgroup (v1) or cgroup2 mount: where it is, which cgroup path is its root, its controllers."""

    point: Path
    root: str  # field 4 of mountinfo: inside a container often the container's own cgroup
    version: str  # "v1" or "v2"
    controllers: frozenset[str]  # v1: from the super options ("rw,memory" -> memory); v2: empty

    def directory(self, cgroup_path: str) -> Path:
        """The directory of ``cgroup_path`` (as /proc/<pid>/cgroup names it) under this mount."""
        return self.point / relative_to_root(cgroup_path, self.root).strip("/")


def read_text(path: Path) -> str | None:
    try:
        return path.read_text()
    except (OSError, UnicodeDecodeError):
        return None


def read_keyed(path: Path) -> dict[str, int]:
    """'name value' lines (memory.stat, memory.events, memory.oom_control); other lines are skipped."""
    out: dict[str, int] = {}
    for line in (read_text(path) or "").splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1].lstrip("-").isdigit():
            out[parts[0]] = int(parts[1])
    return out


def memberships(text: str) -> dict[str, str]:
    """controller -> cgroup path from the text of /proc/<pid>/cgroup; the v2 entry ("0::/path") is ''."""
    found: dict[str, str] = {}
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, controllers, cg_path = parts
        if controllers == "":
            found[""] = cg_path
        for name in controllers.split(","):
            if name:
                found[name] = cg_path
    return found


def mounts(mountinfo: Path) -> tuple[CgroupMount, ...]:
    """Every cgroup and cgroup2 mount in ``mountinfo``, in its order."""
    found = []
    for line in (read_text(mountinfo) or "").splitlines():
        left, sep, right = line.partition(" - ")
        fields, rest = left.split(), right.split()
        if not sep or len(fields) < 5 or not rest or rest[0] not in ("cgroup", "cgroup2"):
            continue
        options = rest[2].split(",") if len(rest) > 2 and rest[0] == "cgroup" else []
        version = "v1" if rest[0] == "cgroup" else "v2"
        found.append(CgroupMount(Path(fields[4]), fields[3], version, frozenset(options)))
    return tuple(found)


def relative_to_root(cgroup_path: str, mount_root: str) -> str:
    """``cgroup_path`` relative to a mount whose root is ``mount_root`` (unchanged when it lies elsewhere)."""
    inside = cgroup_path == mount_root or cgroup_path.startswith(mount_root + "/")
    return cgroup_path[len(mount_root) :] if mount_root not in ("", "/") and inside else cgroup_path
