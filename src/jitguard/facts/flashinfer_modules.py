"""Which FlashInfer JIT modules are already built here, so their first use compiles nothing.

FlashInfer loads a module's library from, in this order: flashinfer-jit-cache's ``jit_cache/<name>/<name>.so``
(else the wheel's ``data/aot/<name>/<name>.so``), then its workspace's ``cached_ops/<name>/<name>.so`` left by an
earlier build (``jit/core.py``, 0.6.x). A module found in one of them needs no nvcc, ninja, host compiler or
``-lcuda``: only its load can fail. Read from the file system only; nothing is imported.

flashinfer-cubin is not such a source: it holds kernel binaries (``cubins/<artifact>/<family>/``) that
FlashInfer would otherwise download on first use, and no module. Each family but DeepGEMM's is launched by a
module that is compiled like any other (``cubin_kernels`` names the families found, with their launchers).
"""

from __future__ import annotations

import re
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


# flashinfer-cubin's kernel families and the FlashInfer module that launches each (read from flashinfer-cubin and
# flashinfer-python 0.6.6: jit/attention/modules.py, jit/gemm/core.py, jit/fused_moe.py, deep_gemm.py).
CUBIN_LAUNCHERS: dict[str, str | None] = {
    "fmha": "fmha_gen",  # TRT-LLM-gen attention
    "gemm": "trtllm_gemm",  # TRT-LLM-gen GEMM
    "batched_gemm": "fused_moe_trtllm_sm100",  # TRT-LLM-gen fused MoE
    "deep-gemm": None,  # flashinfer.deep_gemm loads these through cuda-python: no module
}
_ARTIFACT = re.compile(r"[0-9a-f]{40}")  # FlashInfer's artifact directories are named by commit
_ARTIFACT_SUFFIX = re.compile(r"(-[0-9a-f]{7})+$")  # "gemm-145d1b1-9b113e3" -> "gemm"


def cubin_kernels(fi: FlashinferFacts) -> tuple[tuple[str, str | None], ...]:
    """(family, launcher module or None) for each kernel family flashinfer-cubin holds here, e.g.
    ("batched_gemm", "fused_moe_trtllm_sm100"); two directory levels, never the ~10k files."""
    if fi.cubin_dir is None:
        return ()
    families: set[str] = set()
    try:
        for artifact in fi.cubin_dir.iterdir():
            if _ARTIFACT.fullmatch(artifact.name) and artifact.is_dir():
                families.update(_ARTIFACT_SUFFIX.sub("", p.name) for p in artifact.iterdir() if p.is_dir())
    except OSError:
        return ()
    return tuple((f, CUBIN_LAUNCHERS.get(f)) for f in sorted(families))
