"""Pre-flight checks of where builds and caches write: jitguard's cache dir, FlashInfer's workspace and
Triton's cache dir on a network file system (``cache-on-network-fs``, a warning: things work, less safely).

jitguard moves its own locks and compile slots to local disk by itself (``jitguard.locks.lock_dir``);
the finding says so, and what to set so that the caches themselves are local.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from jitguard.fileio import fallback_path
from jitguard.findings.catalog import make
from jitguard.findings.checks_jitguard import unit
from jitguard.findings.model import Finding

if TYPE_CHECKING:
    from jitguard.facts import Facts
    from jitguard.facts.filesystems import FilesystemFacts, PathFilesystem

# role -> (the backend it concerns, what it is, the variable that moves it, a local value for it)
PLACES = {
    "cache_dir": ("any", "jitguard's cache dir", "JITGUARD_CACHE_DIR", "/var/tmp/jitguard-$(id -u)"),
    "flashinfer_workspace": (
        "flashinfer",
        "FlashInfer's JIT workspace",
        "FLASHINFER_WORKSPACE_BASE",
        "/var/tmp/flashinfer-$(id -u)",
    ),
    "triton_cache_dir": ("triton", "Triton's kernel cache", "TRITON_CACHE_DIR", "/var/tmp/triton-$(id -u)"),
}


def check(facts: Facts, backend: str) -> list[Finding]:
    return unit(backend, lambda: _check(facts, backend))


def _check(facts: Facts, backend: str) -> list[Finding]:
    fs = facts.filesystems
    if fs is None:
        return []
    found = []
    for role, (concerns, what, variable, local) in PLACES.items():
        entry = fs.get(role)
        if entry is None or entry.mount is None or not entry.network or concerns not in ("any", backend):
            continue
        found.append(
            make(
                "cache-on-network-fs",
                backend=concerns,
                evidence=_evidence(entry, fs),
                what=what,
                path=entry.path,
                fs_type=entry.mount.fs_type,
                mount_point=entry.mount.mount_point,
                source=entry.mount.source,
                consequence=_consequence(role, fs),
                variable=variable,
                local=local,
            )
        )
    return found


def _consequence(role: str, fs: FilesystemFacts) -> str:
    locks = fallback_path(Path(fs.lock_base)) if fs.lock_base else fallback_path()
    if role == "cache_dir":
        return (
            f"jitguard keeps its locks and host-wide compile slots in {locks} instead (said once per "
            "process); build records and logs stay here, and builds on other hosts sharing it no longer "
            "wait for each other."
        )
    if role == "flashinfer_workspace":
        return (
            "FlashInfer locks each module's build with flock in it (flashinfer#3777): jitguard takes its own "
            f"build locks on a local stand-in in {locks}, but stock FlashInfer processes and other hosts "
            "still rely on the remote lock, and several hosts may build one module into it at once."
        )
    return (
        "Triton's cache breaks there: removing a kernel's temporary directory meets EBUSY from files NFS "
        "keeps open under another name (triton#11512), and every kernel compile writes several small files."
    )


def _evidence(entry: PathFilesystem, fs: FilesystemFacts) -> list[str]:
    assert entry.mount is not None
    shown = entry.path if entry.resolved == entry.path else f"{entry.path} (resolved: {entry.resolved})"
    return [
        f"{shown}: mount point {entry.mount.mount_point}, type {entry.mount.fs_type}, "
        f"source {entry.mount.source} (from {fs.table})"
    ]
