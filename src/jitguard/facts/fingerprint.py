"""The environment fingerprint: the key of the failure cache (docs/design.md "Fingerprint").

It covers everything that decides whether a kernel build or load succeeds: package versions, GPU arch and
driver, nvcc/c++/ninja (paths and versions), the libstdc++ pair, and the environment variables that change a
build. It leaves out what varies from run to run without changing the outcome (free memory, free disk,
timings), so it is stable across runs and changes when any input changes; a cached failure is then never
retried until something relevant changed. Every process of one environment computes the same key: the
command line (``jitguard doctor``, ``jitguard build``) and each process of an engine, whatever the libraries
those processes import did to their search-path variables (``SEARCH_PATHS``).

Toolchain and libstdc++ facts are written by another module and read defensively (``getattr``): a renamed or
missing attribute weakens the key, it never breaks it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import platform
import sys
from typing import Any

from jitguard.facts.flashinfer import arch_from_capability, parse_arch_list

# Bump when the meaning of the inputs changes, so old cache entries stop matching.
SCHEMA = 1
PACKAGES = (
    "flashinfer-python",
    "flashinfer-jit-cache",
    "flashinfer-cubin",
    "nvidia-cutlass-dsl",
    "apache-tvm-ffi",
    "fla-core",
    "triton",
    "torch",
)
# Variables that change what a build produces or whether it links, loads or fits in memory.
ENV_NAMES = (
    "CUDA_HOME",
    "CUDA_PATH",
    "LIBRARY_PATH",
    "LD_LIBRARY_PATH",
    "LD_PRELOAD",
    "CONDA_PREFIX",
    "CXX",
    "CC",
    "CPATH",
    "C_INCLUDE_PATH",
    "CPLUS_INCLUDE_PATH",
    "NVCC_APPEND_FLAGS",
    "NVCC_PREPEND_FLAGS",
    "NVCC_CCBIN",
    "MAX_JOBS",
    "JITGUARD_MEMORY_BUDGET",
    "JITGUARD_JOB_MEMORY",
)
ENV_PREFIXES = ("FLASHINFER_",)
# Colon-separated directory lists that a linker, loader or compiler searches. They enter the key as the
# directories a search can visit (``search_path``), not as written: libraries rewrite them in the processes
# that import them, without changing any search. opencv's ``cv2`` (a vLLM dependency, imported by ``from vllm
# import LLM``) prepends ``<site-packages>/cv2/../../lib64:`` to LD_LIBRARY_PATH, a directory that does not
# exist plus an empty entry, once in every process that imports it; vLLM's engine-core processes (forked: the
# rewritten value; spawned: rewritten again) would otherwise each have a key of their own, none of them the
# one ``jitguard doctor`` and ``jitguard build`` report, and a failure recorded by one never reaches another.
# FLASHINFER_CUDA_ARCH_LIST set to what FlashInfer detects from the GPUs anyway builds the same kernels as
# unset: `jitguard build flashinfer-gdn` sets it (9.0a) for its build, an engine on the same H200 does not,
# and a failure the prebuild recorded must reach that engine (found on the H200: it did not).
ARCH_LIST = "FLASHINFER_CUDA_ARCH_LIST"
SEARCH_PATHS = ("LIBRARY_PATH", "LD_LIBRARY_PATH", "CPATH", "C_INCLUDE_PATH", "CPLUS_INCLUDE_PATH")


def describe(**parts: Any) -> dict[str, Any]:
    """What goes into the fingerprint, as plain data (shown by ``doctor --json``). Facts that could not be
    collected (``unavailable``: name -> error) are part of the key, so a fixed probe gives a new one."""
    described = {
        "schema": SCHEMA,
        "python": f"{sys.version_info.major}.{sys.version_info.minor}",
        "machine": platform.machine(),
        "packages": _packages(parts.get("packages")),
        "gpu": _gpu(parts.get("gpu")),
        "toolchain": _toolchain(parts.get("toolchain")),
        "libstdcxx": _libstdcxx(parts.get("libstdcxx")),
        "link": _link(parts.get("link")),
        "env": _env(parts.get("environment"), parts.get("gpu")),
    }
    dsl = _dsl(parts.get("dsl_path"))
    if dsl is not None:  # CuTeDSL era only, so other keys stay as they were
        described["dsl"] = dsl
    unavailable = parts.get("unavailable")
    if unavailable:
        described["unavailable"] = dict(sorted(unavailable.items()))
    return described


def compute(**parts: Any) -> str:
    """A short stable key (16 hex digits of a SHA-256) over ``describe(**parts)``."""
    text = json.dumps(describe(**parts), sort_keys=True, default=str, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _dsl(dsl_path: Any) -> dict[str, Any] | None:
    """Where ``import cutlass`` finds the DSL and whose copy it is: putting its packages on the path (or
    taking another copy off it) changes whether FlashInfer's CuTeDSL kernels import, and must reach a failure
    recorded before the fix."""
    if dsl_path is None or not hasattr(dsl_path, "kernels"):
        return None
    owner = getattr(dsl_path, "owner", None)
    return {
        "cutlass": _str(getattr(dsl_path, "imported_from", None)),
        "owner": f"{owner.dist}=={owner.version}" if owner is not None else None,
        "kernels": [[k.label, k.path is not None, list(k.missing_imports)] for k in dsl_path.kernels],
    }


def _packages(packages: Any) -> dict[str, str | None]:
    version = getattr(packages, "version", None)
    if not callable(version):
        return {}
    return {name: version(name) for name in PACKAGES}


def _gpu(gpu: Any) -> dict[str, Any]:
    return {
        "capabilities": list(getattr(gpu, "capabilities", ()) or ()),
        "driver": getattr(gpu, "driver_version", None),
    }


def _tool(tool: Any) -> dict[str, Any] | None:
    if tool is None:
        return None
    return {"path": _str(getattr(tool, "path", None)), "version": _str(getattr(tool, "version", None))}


def _toolchain(toolchain: Any) -> dict[str, Any]:
    if toolchain is None:
        return {}
    return {
        "nvcc": _tool(getattr(toolchain, "nvcc", None)),
        "cxx": _tool(getattr(toolchain, "cxx", None)),
        "ninja": _tool(getattr(toolchain, "ninja", None)),
        "cuda_home": _str(getattr(toolchain, "cuda_home", None)),
    }


def _libstdcxx(facts: Any) -> dict[str, Any]:
    """The compiler's and the runtime's libstdc++: path and newest GLIBCXX version. Accepts both shapes in
    use: flat (``runtime_lib``, ``runtime_max``) and nested (``runtime.path``)."""
    if facts is None:
        return {}
    out: dict[str, Any] = {}
    for side in ("compiler", "runtime"):
        nested = getattr(facts, side, None)
        path = getattr(facts, f"{side}_lib", None) or getattr(nested, "path", None)
        newest = getattr(facts, f"{side}_max", None) or getattr(nested, "max_version", None)
        out[side] = {"path": _str(path), "max": _str(newest)}
    return out


def _link(link: Any) -> dict[str, bool]:
    """The outcome flags of the trial link (whether libcuda/libcudart link), so installing a driver library
    invalidates a cached link failure. Only boolean fields, and none about caching, so the key stays
    stable."""
    if link is None or not dataclasses.is_dataclass(link):
        return {}
    return {
        f.name: getattr(link, f.name)
        for f in dataclasses.fields(link)
        if isinstance(getattr(link, f.name), bool) and "cache" not in f.name
    }


def _env(environment: Any, gpu: Any = None) -> dict[str, str]:
    get = getattr(environment, "as_dict", None)
    variables: dict[str, str] = get() if callable(get) else {}
    out: dict[str, str] = {}
    for name, value in sorted(variables.items()):
        if name not in ENV_NAMES and not name.startswith(ENV_PREFIXES):
            continue
        if name in SEARCH_PATHS:
            value = search_path(value)
            if not value:
                continue  # nothing a search can visit: the same as unset
        if name == ARCH_LIST and _same_archs(value, detected_arch_list(gpu)):
            continue  # what FlashInfer builds for here anyway: the same as unset
        out[name] = value
    return out


def detected_arch_list(gpu: Any) -> str | None:
    """The arch list FlashInfer derives from the visible GPUs when FLASHINFER_CUDA_ARCH_LIST is unset (each
    device's capability, 'a' for majors >= 9: an H200 gives '9.0a'); None without a GPU."""
    pairs = getattr(gpu, "capability_pairs", None)
    found = pairs() if callable(pairs) else ()
    return " ".join(sorted({arch_from_capability(major, minor) for major, minor in found})) or None


def _same_archs(value: str, detected: str | None) -> bool:
    if detected is None:
        return False
    archs, _, error = parse_arch_list(value)
    return error is None and archs == parse_arch_list(detected)[0]


def search_path(value: str) -> str:
    """The entries of a directory list that a search can visit, in order, each directory once (the first
    occurrence wins, so a repeat changes nothing). Left out: directories that do not exist (nothing is found
    there until one is made, which gives a new key) and empty entries, which name the working directory
    (FlashInfer builds and links in its own build directory, where no libraries or headers are searched for)."""
    kept: list[str] = []
    seen: set[str] = set()
    for entry in value.split(":"):
        if not entry or not os.path.isdir(entry):
            continue
        real = os.path.realpath(entry)
        if real not in seen:
            seen.add(real)
            kept.append(entry)
    return ":".join(kept)


def _str(value: Any) -> str | None:
    return None if value is None else str(value)
