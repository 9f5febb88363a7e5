"""Which FlashInfer JIT modules are already built here, so their first use compiles nothing.

FlashInfer loads a module's library from, in this order: flashinfer-jit-cache's ``jit_cache/<name>/<name>.so``
(else the wheel's ``data/aot/<name>/<name>.so``), then its workspace's ``cached_ops/<name>/<name>.so`` left by an
earlier build (``jit/core.py``, 0.6.x). A module found in one of them needs no nvcc, ninja, host compiler or
``-lcuda``: only its load can fail. Read from the file system only; nothing is imported.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from jitguard.facts.flashinfer import FlashinferFacts


@dataclass(frozen=True)
class PrebuiltModule:
    name: str  # FlashInfer's module name, e.g. "sampling", "fused_moe_90"
    path: Path  # the library FlashInfer would load
    source: str  # "flashinfer-jit-cache", "flashinfer-aot" or "cached_ops"


def module_dirs(fi: FlashinferFacts) -> tuple[tuple[Path, str], ...]:
    """The directories FlashInfer loads prebuilt modules from, in its order, each with its source name."""
    found: list[tuple[Path, str]] = []
    if fi.jit_cache_dir is not None and fi.jit_cache_matches is not False:
        found.append((fi.jit_cache_dir, "flashinfer-jit-cache"))
    elif fi.package_dir is not None:
        found.append((Path(fi.package_dir) / "data" / "aot", "flashinfer-aot"))
    if fi.jit_dir is not None:
        found.append((fi.jit_dir, "cached_ops"))
    return tuple(found)


def prebuilt(fi: FlashinferFacts, prefixes: Sequence[str]) -> tuple[PrebuiltModule, ...]:
    """Every built module whose name starts with one of ``prefixes`` (a module is named after its variant,
    e.g. ``batch_prefill_with_kv_cache_dtype_q_bf16_...``), first source first, one entry per name."""
    if not fi.installed or not prefixes:
        return ()
    seen: set[str] = set()
    found: list[PrebuiltModule] = []
    for directory, source in module_dirs(fi):
        try:
            names = sorted(p.name for p in directory.iterdir() if p.name.startswith(tuple(prefixes)))
        except OSError:
            continue
        for name in names:
            library = directory / name / f"{name}.so"
            if name not in seen and _is_file(library):
                seen.add(name)
                found.append(PrebuiltModule(name, library, source))
    return tuple(found)


def _is_file(path: Path) -> bool:
    try:
        return path.is_file()
    except OSError:
        return False
