"""The environment variables that change how FlashInfer, FLA/Triton, vLLM and jitguard build or load kernels,
with secrets redacted (by name and by value: ``jitguard.redaction``), plus the traps hidden in their values (MAX_JOBS that FlashInfer silently ignores,
FLASHINFER_JIT_VERBOSE that also turns on debug device code)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from jitguard.redaction import redact_value

# Named variables that matter; prefixes below add whole families.
NAMES = (
    "CUDA_HOME",
    "CUDA_PATH",
    "CUDA_VISIBLE_DEVICES",
    "CUDA_DEVICE_ORDER",
    "LIBRARY_PATH",
    "LD_LIBRARY_PATH",
    "LD_PRELOAD",
    "CPATH",
    "C_INCLUDE_PATH",
    "CPLUS_INCLUDE_PATH",
    "CONDA_PREFIX",
    "CXX",
    "CC",
    "PATH",
    "HOME",
    "XDG_CACHE_HOME",
    "TMPDIR",
    "MAX_JOBS",
    "NVCC_APPEND_FLAGS",
    "NVCC_PREPEND_FLAGS",
    "NVCC_CCBIN",
    "TORCH_CUDA_ARCH_LIST",
    "TORCH_EXTENSIONS_DIR",
    "TRITON_CACHE_DIR",
    "TRITON_INTERPRET",
    "VLLM_PLUGINS",
    "VLLM_ATTENTION_BACKEND",
    "VLLM_CACHE_ROOT",
)
PREFIXES = ("FLASHINFER_", "FLA_", "JITGUARD_", "CUTE_DSL_")
# vLLM has hundreds of VLLM_* variables; only those about the kernels we guard are worth showing.
_VLLM_RELEVANT = re.compile(r"FLASHINFER|GDN|CUTLASS|TRITON|ATTENTION|PLUGIN", re.IGNORECASE)


@dataclass(frozen=True)
class EnvironmentFacts:
    variables: tuple[tuple[str, str], ...]  # sorted (name, value), secrets redacted
    max_jobs: str | None  # the raw MAX_JOBS
    max_jobs_value: int | None  # what FlashInfer passes to ninja -j (None: ninja's default)
    max_jobs_valid: bool  # False when MAX_JOBS is set but FlashInfer ignores it
    jit_debug_trap: bool  # FLASHINFER_JIT_VERBOSE=1 without FLASHINFER_JIT_DEBUG: debug kernels (-G -O0)

    def get(self, name: str) -> str | None:
        return next((v for k, v in self.variables if k == name), None)

    def as_dict(self) -> dict[str, str]:
        return dict(self.variables)


def relevant(name: str) -> bool:
    if name in NAMES or name.startswith(PREFIXES):
        return True
    return name.startswith("VLLM_") and bool(_VLLM_RELEVANT.search(name))


def probe(env: Mapping[str, str]) -> EnvironmentFacts:
    variables = tuple(sorted((k, redact_value(k, v)) for k, v in env.items() if relevant(k)))
    raw = env.get("MAX_JOBS")
    # FlashInfer (jit/cpp_ext.py) passes -j only when MAX_JOBS.isdigit(); anything else (" 4", "4.0", "auto")
    # is dropped without a word and ninja runs its default nproc+2 jobs.
    # isdigit() also accepts digits int() rejects ("²"): FlashInfer would crash on those; we report them invalid.
    value = int(raw) if raw is not None and raw.isdigit() and raw.isascii() else None
    valid = raw is None or value is not None
    if value == 0:
        valid = False  # "-j 0" means unlimited parallelism to ninja: the opposite of what anyone means
    # FlashInfer (jit/core.py): debug = (FLASHINFER_JIT_DEBUG if set else FLASHINFER_JIT_VERBOSE) == "1".
    trap = env.get("FLASHINFER_JIT_DEBUG") is None and env.get("FLASHINFER_JIT_VERBOSE", "0") == "1"
    return EnvironmentFacts(
        variables=variables, max_jobs=raw, max_jobs_value=value, max_jobs_valid=valid, jit_debug_trap=trap
    )
