"""Pre-flight checks of the directories builds write to: FlashInfer's JIT workspace and jitguard's own cache dir
(refused, unwritable, low on space, writable by other users).

The findings about jitguard's cache dir concern every backend and carry ``backend="any"``; ``own_cache_dir``
is also what ``jitguard cache`` reports for the directory it was given.
"""

from __future__ import annotations

import os
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
