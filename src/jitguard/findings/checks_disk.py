"""Pre-flight checks of the directories builds write to: FlashInfer's JIT workspace and jitguard's own cache dir
(refused, unwritable, low on space, writable by other users).

The findings about jitguard's cache dir concern every backend and carry ``backend="any"``; ``own_cache_dir``
is also what ``jitguard cache`` reports for the directory it was given.
"""

from __future__ import annotations

import os
import shlex
from typing import TYPE_CHECKING, Any

from jitguard.config import format_bytes
from jitguard.facts.disk import PathFacts
from jitguard.facts.flashinfer import ERA_NVCC
from jitguard.fileio import fallback_path
from jitguard.findings.catalog import make
from jitguard.findings.model import Finding, Severity

if TYPE_CHECKING:
    from jitguard.facts import Facts

# Free space to ask for: the nvcc GDN build writes objects, the .so and nvcc temporaries (~1-2 GiB with
# 66 TUs); jitguard's cache holds small JSON records and build logs.
WORKSPACE_MIN_FREE = 2 * 1024**3
CACHE_MIN_FREE = 100 * 1024**2


def needs_nvcc_build(facts: Facts) -> bool:
    """FlashInfer compiles its GDN module with nvcc here (its era, and no prebuilt module)."""
    fi = facts.flashinfer
    return fi.era == ERA_NVCC and fi.prebuilt_gdn is None


def workspace(facts: Facts) -> list[Finding]:
    fi = facts.flashinfer
    entry = facts.disk.get(fi.workspace_dir)
    if entry is None:
        return []
    return _directory(
        entry,
        backend="flashinfer",
        purpose=f"FlashInfer's JIT workspace ({fi.workspace_dir})",
        unwritable_severity=None,
        consequence="`import flashinfer` creates it and fails otherwise; builds cannot write their output.",
        min_free=WORKSPACE_MIN_FREE if needs_nvcc_build(facts) else None,
        low_purpose=f"The build of {fi.gdn_module}",
        loader="FlashInfer",
        relocate={
            "relocate_text": "Or point FlashInfer's workspace at a directory of your own:",
            "relocate_command": "export FLASHINFER_WORKSPACE_BASE=/path/with/space",
        },
    )


_CACHE_RELOCATE: dict[str, Any] = {
    "relocate_text": "Or move jitguard's cache dir:",
    "relocate_command": "export JITGUARD_CACHE_DIR=/path/of/your/own",
}


def own_cache(facts: Facts) -> list[Finding]:
    workspace = str(facts.flashinfer.workspace_dir)
    found = []
    for entry in facts.disk.paths:
        if entry.path != workspace:
            found += own_cache_dir(entry)
    return found


def own_cache_dir(entry: PathFacts) -> list[Finding]:
    """The findings about jitguard's own cache dir: refused (``cache-dir-untrusted``: not read, not written),
    unwritable, low on space. Its fallback for logs and slots is the one ``jitguard.fileio.state_dir`` uses."""
    fallback = f"the private temporary directory {fallback_path()}"
    if entry.untrusted:
        return [
            make(
                "cache-dir-untrusted",
                backend="any",
                evidence=_disk_evidence(entry),
                path=entry.path,
                reasons="; ".join(entry.untrusted),
                fallback=fallback,
                **_CACHE_RELOCATE,
            )
        ]
    return _directory(
        entry,
        backend="any",
        purpose=f"jitguard's cache dir ({entry.path})",
        unwritable_severity="warning",
        consequence=f"Build failures are not remembered, and build logs and compile slots go to {fallback}.",
        min_free=CACHE_MIN_FREE,
        low_purpose="jitguard's cache (failure records, build logs)",
        loader="jitguard's build hook",
        relocate=_CACHE_RELOCATE,
    )


def in_the_way(entry: PathFacts) -> bool:
    """A file stands where the directory ``entry`` is, or above it: nothing can be read there or made."""
    if entry.exists and not entry.is_dir:
        return True
    return entry.existing is not None and not os.path.isdir(entry.existing)


def blocked_directory(
    entry: PathFacts, purpose: str, variable: str | None = "JITGUARD_CACHE_DIR"
) -> list[Finding]:
    """``cache-dir-unwritable`` (an error) for a directory a command must use, ``purpose`` naming it;
    ``variable``: the one that moves it (None: no such fix)."""
    relocate = {
        "relocate_text": f"Or point {variable} at a directory of your own:",
        "relocate_command": f"export {variable}=/path/of/your/own",
    }
    return _directory(
        entry,
        backend="any",
        purpose=purpose,
        unwritable_severity="error",
        consequence="The command cannot use it.",
        min_free=None,
        low_purpose=purpose,
        loader="jitguard",
        relocate=relocate if variable else {},
    )


def _repair(entry: PathFacts) -> dict[str, str]:
    """The first fix of ``cache-dir-unwritable``, for what is in the way: a file where the directory should
    be (or above it), a read-only file system (no command: remount or move it), else ownership."""
    path = shlex.quote(entry.path)
    if entry.exists and not entry.is_dir:
        return {
            "repair_text": f"{entry.path} is a file, not a directory: move it aside and make the directory:",
            "repair_command": f"mv {path} {path}.moved && mkdir -p {path}",
        }
    if entry.existing and not os.path.isdir(entry.existing):
        above = shlex.quote(entry.existing)
        return {
            "repair_text": f"{entry.existing} is a file, so {entry.path} cannot be made under it: move it aside:",
            "repair_command": f"mv {above} {above}.moved && mkdir -p {path}",
        }
    if entry.read_only_fs:
        return {}  # only moving it (the next fix) or remounting helps
    return {
        "repair_text": "Give this user the directory:",
        "repair_command": f"mkdir -p {path} && chown -R $(id -u):$(id -g) {path}",
    }


def _directory(
    entry: PathFacts,
    *,
    backend: str,
    purpose: str,
    unwritable_severity: Severity | None,
    consequence: str,
    min_free: int | None,
    low_purpose: str,
    loader: str,
    relocate: dict[str, Any],
) -> list[Finding]:
    """The findings about one directory something writes to: unwritable, low on space (``min_free``; None to
    skip), or writable by other users (whose files ``loader`` would then load)."""
    evidence = _disk_evidence(entry)
    found = []
    if not entry.writable:
        found.append(
            make(
                "cache-dir-unwritable",
                backend=backend,
                severity=unwritable_severity,
                evidence=evidence,
                path=entry.path,
                purpose=purpose,
                uid=os.geteuid(),
                error=entry.error or "not writable",
                consequence=consequence,
                **_repair(entry),
                **relocate,
            )
        )
    elif min_free is not None and entry.free_bytes is not None and entry.free_bytes < min_free:
        found.append(
            make(
                "disk-low",
                backend=backend,
                evidence=evidence,
                path=entry.path,
                existing=entry.existing,
                free=format_bytes(entry.free_bytes),
                need=format_bytes(min_free),
                purpose=low_purpose,
                **relocate,
            )
        )
    if entry.shared_writable:
        found.append(
            make(
                "cache-dir-shared-writable",
                backend=backend,
                evidence=evidence,
                path=entry.path,
                existing=entry.existing,
                purpose=purpose,
                reasons="; ".join(f"{entry.existing}: {r}" for r in entry.others_can_write),
                loader=loader,
                **relocate,
            )
        )
    return found


def _disk_evidence(entry: PathFacts) -> list[str]:
    lines = [
        f"{entry.path}: exists={entry.exists}, nearest existing={entry.existing}, mode={entry.mode}, "
        f"owner uid={entry.owner_uid}, writable={entry.writable}"
    ]
    if entry.free_bytes is not None:
        lines.append(f"free: {format_bytes(entry.free_bytes)} of {format_bytes(entry.total_bytes or 0)}")
    if entry.error:
        lines.append(entry.error)
    return lines
