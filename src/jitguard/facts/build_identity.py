"""The build identity: the part of the environment that decides the bytes a kernel build produces.

The environment fingerprint (``facts.fingerprint``) is the key of the failure cache: it holds everything that
decides whether a build *succeeds here*, including where things are (CUDA_HOME, LD_LIBRARY_PATH), the GPU
driver and whether libcuda links. A module built on one host works on another when far less is the same:
the package versions (FlashInfer's headers and generators, torch's ABI), Python, the CPU architecture, the
versions of nvcc, the host compiler and ninja, the newest GLIBCXX the compiler's libstdc++ offers (what the
library may need at load), and the variables that change a compile (FLASHINFER_* flags and arch list, CXX,
NVCC_*_FLAGS, include paths). Paths, the driver and link facts are left out, so a GPU-less build host and the
serving hosts agree. The GPU's arch counts only when FLASHINFER_CUDA_ARCH_LIST is unset (FlashInfer then
compiles for the visible GPUs).

``compute(described)`` takes ``fingerprint.describe(...)``'s plain data and returns a short stable key: the
artifact store (``fleet.artifact_store``) files modules under it.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

from jitguard.facts import fingerprint
from jitguard.facts.fingerprint import ENV_NAMES

SCHEMA = 1
# The fingerprint's variables that say where things are, how many jobs run or whether a link or load works,
# never what a compile produces; every other one (CXX, CC, include paths, NVCC_*_FLAGS, ...) is identity.
_PLACEMENT_ENV = (
    "CUDA_HOME",
    "CUDA_PATH",
    "LIBRARY_PATH",
    "LD_LIBRARY_PATH",
    "LD_PRELOAD",
    "CONDA_PREFIX",
    "MAX_JOBS",
    "JITGUARD_MEMORY_BUDGET",
    "JITGUARD_JOB_MEMORY",
)
COMPILE_ENV = tuple(name for name in ENV_NAMES if name not in _PLACEMENT_ENV)
# FLASHINFER_* variables that only say where things go or how loudly, never what is compiled.
_PLACEMENT = ("FLASHINFER_WORKSPACE_BASE", "FLASHINFER_DISABLE_VERSION_CHECK", "FLASHINFER_LOGLEVEL")


def describe(described: Mapping[str, Any]) -> dict[str, Any]:
    """The build identity as plain data, from ``fingerprint.describe(...)``."""
    env = described.get("env") or {}
    toolchain = described.get("toolchain") or {}
    libstdcxx = described.get("libstdcxx") or {}
    identity: dict[str, Any] = {
        "schema": SCHEMA,
        "python": described.get("python"),
        "machine": described.get("machine"),
        "packages": described.get("packages") or {},
        "tools": {name: _version(toolchain.get(name)) for name in ("nvcc", "cxx", "ninja")},
        "glibcxx": (libstdcxx.get("compiler") or {}).get("max"),
        "env": {
            k: v
            for k, v in sorted(env.items())
            if k in COMPILE_ENV or (k.startswith("FLASHINFER_") and k not in _PLACEMENT)
        },
    }
    if "FLASHINFER_CUDA_ARCH_LIST" not in env:
        identity["gpu"] = (described.get("gpu") or {}).get("capabilities") or []
    unavailable = described.get("unavailable") or {}
    missing = sorted(k for k in unavailable if k in ("packages", "toolchain", "libstdcxx", "environment"))
    if missing:
        identity["unavailable"] = missing  # an unknown part is part of the key: it never matches a known one
    return identity


def compute(described: Mapping[str, Any]) -> str:
    """A short stable key (16 hex digits of a SHA-256) over ``describe(described)``."""
    text = json.dumps(describe(described), sort_keys=True, default=str, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def of_facts(facts: Any) -> str:
    """The build identity of collected ``Facts``."""
    described = fingerprint.describe(
        packages=facts.packages,
        gpu=facts.gpu,
        toolchain=facts.toolchain,
        libstdcxx=facts.libstdcxx,
        environment=facts.environment,
        unavailable=facts.unavailable,
    )
    return compute(described)


def _version(tool: Any) -> str | None:
    return tool.get("version") if isinstance(tool, dict) else None
