"""A cgroup for each build attempt, where this process may make one: containment that nothing escapes.

A process can leave its group or session, not its cgroup. Where jitguard may make one (v2 with
``cgroup.kill``, else the v1 freezer), every attempt runs in a fresh one; elsewhere the tree relies on its
session, the keeper and PDEATHSIG. A leftover of a dead build is killed and removed. ``JITGUARD_CGROUP``:
``auto`` (default), ``v2``, ``freezer`` or ``off``.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
from pathlib import Path

from jitguard.config import read
from jitguard.supervise.keeper import CGROUP_PREFIX, Cgroup, start_time

LOG = logging.getLogger("jitguard.supervise")
CGROUP_ENV = "JITGUARD_CGROUP"
CHOICES = ("auto", "v2", "freezer", "off")
_COUNTER = itertools.count()


def _mounts(mountinfo: str) -> dict[str, tuple[Path, str]]:
    """'v2' and/or 'freezer' -> (mount point, the cgroup path mounted there)."""
    found: dict[str, tuple[Path, str]] = {}
    for line in mountinfo.splitlines():
        left, _, right = line.partition(" - ")
        fields, rest = left.split(), right.split()
        if len(fields) < 5 or len(rest) < 3:
            continue
        root, point = fields[3], Path(fields[4].replace("\\040", " "))
        if rest[0] == "cgroup2":
            found.setdefault("v2", (point, root))
        elif rest[0] == "cgroup" and "freezer" in rest[2].split(","):
            found.setdefault("freezer", (point, root))
    return found


def _own_paths(cgroup_file: str) -> dict[str, str]:
    """'v2' and/or 'freezer' -> this process's cgroup path in that hierarchy (/proc/self/cgroup)."""
    paths: dict[str, str] = {}
    for line in cgroup_file.splitlines():
        number, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        if number == "0" and controllers == "":
            paths["v2"] = path
        elif "freezer" in controllers.split(","):
            paths["freezer"] = path
    return paths


def _own_dir(kind: str, proc: Path) -> Path | None:
    try:
        mounts = _mounts((proc / "self" / "mountinfo").read_text())
        own = _own_paths((proc / "self" / "cgroup").read_text())
    except OSError:
        return None
    if kind not in mounts or kind not in own:
        return None
    point, root = mounts[kind]
    path = own[kind]
    if root != "/" and path.startswith(root):
        path = path[len(root) :]
    return point / path.lstrip("/")


def _owner_gone(name: str) -> bool:
    # jitguard-<pid>-<start ticks>-<n>
    parts = name[len(CGROUP_PREFIX) :].split("-")
    try:
        pid, ticks = int(parts[0]), int(parts[1])
    except (IndexError, ValueError):
        return False
    return start_time(pid) != ticks


def sweep(directory: Path, version: int) -> int:
    """Kill the members of and remove every leftover jitguard cgroup below ``directory``; returns how many."""
    removed = 0
    try:
        entries = [p for p in directory.iterdir() if p.name.startswith(CGROUP_PREFIX) and p.is_dir()]
    except OSError:
        return 0
    for entry in entries:
        if not _owner_gone(entry.name):
            continue
        leftover = Cgroup(str(entry), version)
        if leftover.pids():
            LOG.warning(
                "jitguard: killing %d process(es) a dead build left in %s", len(leftover.pids()), entry
            )
            leftover.kill_all()
        removed += leftover.remove()
    return removed


def create(choice: str | None = None, *, proc: Path = Path("/proc")) -> Cgroup | None:
    """A new, empty cgroup for one attempt below this process's own, or None where none can be made."""
    choice = (choice or read(CGROUP_ENV) or "auto").lower()  # a malformed JITGUARD_CGROUP: ConfigError
    if choice == "off":
        return None
    kinds = {"auto": ("v2", "freezer"), "v2": ("v2",), "freezer": ("freezer",)}[choice]
    me = os.getpid()
    name = f"{CGROUP_PREFIX}{me}-{start_time(me)}-{next(_COUNTER)}"
    for kind in kinds:
        parent = _own_dir(kind, proc)
        if parent is None:
            continue
        version = 2 if kind == "v2" else 1
        sweep(parent, version)
        path = parent / name
        try:
            path.mkdir()
        except OSError:
            continue
        # v2 before Linux 5.14 has no one-step kill (cgroup.kill): the freezer hierarchy or the keeper does it.
        if not (path / ("cgroup.kill" if version == 2 else "freezer.state")).exists():
            with contextlib.suppress(OSError):
                path.rmdir()
            continue
        return Cgroup(str(path), version)
    return None
