"""Toolchain checks: facts about nvcc, ninja, the host compiler, the trial link and libstdc++ turned into
findings for a backend, and the exact ELF check of a built module against the runtime libstdc++.

Only FlashInfer's nvcc era compiles and links on the host; its CuTeDSL era, Triton and PyTorch need none of
this, so they get no toolchain findings. Fixes are filled with what the probes found on this machine (a
directory that really holds libcuda.so, a toolkit that really has headers); a fix whose facts are missing is
dropped, not shown with a hole in it (``toolchain_fixes`` fills them).
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from jitguard.facts import FactUnavailable, elf
from jitguard.facts.libstdcxx import SONAME, LibstdcxxFacts
from jitguard.findings.catalog import make
from jitguard.findings.checks_jitguard import unit
from jitguard.findings.model import Finding
from jitguard.findings.toolchain_fixes import (
    MIN_NVCC_FOR_GDN_SM90,
    cxx_params,
    glibcxx_fix_params,
    header_params,
    libstdcxx_params,
    link_params,
    nvcc_params,
)

if TYPE_CHECKING:
    from jitguard.facts import Facts
    from jitguard.facts.toolchain import ToolchainFacts

BACKEND = "flashinfer"
# Eras of FlashInfer (facts.flashinfer.era, system engineer) in which nothing is compiled on the host.
_NO_HOST_BUILD_ERAS = ("cutedsl", "none", "too-old")


def check(facts: Facts, backend: str) -> list[Finding]:
    """Toolchain findings for ``backend`` (``flashinfer``, ``triton`` or ``torch``)."""
    if backend != BACKEND:
        return []
    fi = getattr(facts, "flashinfer", None)
    if getattr(fi, "era", None) in _NO_HOST_BUILD_ERAS:
        return []
    prebuilt = getattr(fi, "prebuilt_gdn", None)
    if prebuilt and os.path.exists(str(prebuilt)):
        # Nothing compiles or links: only the load can fail, and that is checked exactly on the module itself.
        return unit(
            BACKEND,
            lambda: check_built_library(
                Path(str(prebuilt)), facts.libstdcxx, cxx_alternatives=facts.toolchain.cxx_alternatives
            ),
        )
    # Three units, so a fact that could not be collected (say libstdc++, without pyelftools) costs only the
    # checks that read it: the link verdict still stands on its own evidence.
    return jit_build(facts)


def jit_build(facts: Facts) -> list[Finding]:
    """The toolchain findings for building and loading any FlashInfer nvcc JIT module (sampling, MoE,
    attention, ...), whatever the GDN era: FlashInfer's CuTeDSL era still builds those with nvcc and ninja,
    and a prebuilt GDN module says nothing about them."""
    found = unit(BACKEND, lambda: _tools(facts))
    found += unit(BACKEND, lambda: _link(facts))
    return found + unit(BACKEND, lambda: _runtime_libstdcxx(facts))


def _tools(facts: Facts) -> list[Finding]:
    tc = facts.toolchain
    found: list[Finding] = []
    if not tc.cxx.usable:
        found.append(make("cxx-missing", backend=BACKEND, evidence=_tool_evidence(tc.cxx), **cxx_params(tc)))
    if not tc.ninja.usable:
        found.append(
            make("ninja-missing", backend=BACKEND, evidence=_tool_evidence(tc.ninja), path=tc.search_path)
        )
    if not tc.nvcc.usable:
        found.append(make("nvcc-missing", backend=BACKEND, evidence=_nvcc_evidence(tc), **nvcc_params(tc)))
    elif tc.nvcc_release is not None and tc.nvcc_release < MIN_NVCC_FOR_GDN_SM90:
        found.append(
            make(
                "nvcc-too-old",
                backend=BACKEND,
                evidence=_nvcc_evidence(tc),
                **nvcc_params(tc, newer=True),
            )
        )
    if tc.nvcc.usable and not tc.nvcc_finds_headers:
        found.append(
            make(
                "cuda-headers-missing",
                backend=BACKEND,
                evidence=_header_evidence(tc),
                **header_params(tc),
            )
        )
    return found


def _link(facts: Facts) -> list[Finding]:
    tc, link = facts.toolchain, facts.link
    found: list[Finding] = []
    if link.error is None:
        for library in ("cudart", "cuda"):
            trial = link.trial(library)
            if trial.status in ("missing", "failed"):
                found.append(
                    make(
                        f"link-missing-lib{library}",
                        backend=BACKEND,
                        evidence=trial.evidence,
                        **link_params(library, link, tc),
                    )
                )
    return found


def _runtime_libstdcxx(facts: Facts) -> list[Finding]:
    tc, lib = facts.toolchain, facts.libstdcxx
    found: list[Finding] = []
    if lib.runtime_older:
        found.append(
            make(
                "libstdcxx-runtime-older",
                backend=BACKEND,
                evidence=_libstdcxx_evidence(lib),
                **libstdcxx_params(lib, tc),
            )
        )
    return found


def check_built_library(
    so_path: Path, runtime: LibstdcxxFacts, *, cxx_alternatives: Sequence[str] = ()
) -> list[Finding]:
    """The exact load check of a built module: GLIBCXX/CXXABI versions ``so_path`` needs from libstdc++.so.6
    that ``runtime.runtime_lib`` does not define -> one ``so-glibcxx-missing`` finding naming them. ``[]`` when
    all are present, or when the module or the runtime library cannot be read, or the libstdc++ facts could not
    be collected at all (pyelftools missing: nothing can be said exactly, and the load itself will tell)."""
    try:
        runtime_lib = runtime.runtime_lib
    except FactUnavailable:
        return []
    if runtime_lib is None:
        return []
    try:
        needed = elf.needed_versions(so_path).get(SONAME, ())
    except elf.ElfReadError:
        return []
    provided = set(runtime.runtime_versions)
    if not provided:
        return []
    missing = tuple(v for v in needed if v not in provided)
    if not missing:
        return []
    evidence = [
        f"{so_path} needs from {SONAME}: {', '.join(needed)}",
        f"{runtime.runtime_lib} (via {runtime.runtime_source}) provides GLIBCXX up to {runtime.runtime_max}"
        f"{_cxxabi_note(runtime.runtime_versions)}",
        f"missing: {', '.join(missing)}",
    ]
    params = glibcxx_fix_params(missing, runtime, cxx_alternatives)
    return [make("so-glibcxx-missing", backend=BACKEND, evidence=evidence, so_path=str(so_path), **params)]


# Parameters: public so the log classifier can fill the same fixes from the same facts.


def _cxxabi_note(versions: Sequence[str]) -> str:
    newest = elf.max_version(versions, "CXXABI")
    return f" and CXXABI up to {newest}" if newest else ""


def _tool_evidence(tool: Any) -> list[str]:
    lines = [f"{tool.name}: {shlex.join(tool.command) or '(empty command)'}"]
    if tool.path:
        lines.append(f"resolved to {tool.path}")
    if tool.error:
        lines.append(tool.error)
    return lines


def _nvcc_evidence(tc: ToolchainFacts) -> list[str]:
    lines = [f"cuda_home = {tc.cuda_home} (from {tc.cuda_home_source})", *_tool_evidence(tc.nvcc)]
    if tc.nvcc.banner:
        lines.append(tc.nvcc.banner)
    return lines


def _header_evidence(tc: ToolchainFacts) -> list[str]:
    looked = [os.path.join(tc.cuda_home or "$cuda_home", "include"), *tc.nvcc_include_dirs]
    return [
        f"cuda_home = {tc.cuda_home} (from {tc.cuda_home_source})",
        f"no cuda_runtime.h in: {', '.join(looked)}",
    ]


def _libstdcxx_evidence(lib: LibstdcxxFacts) -> list[str]:
    return [
        f"compiler's libstdc++: {lib.compiler_lib} (GLIBCXX up to {lib.compiler_max})",
        f"runtime libstdc++: {lib.runtime_lib} via {lib.runtime_source} (GLIBCXX up to {lib.runtime_max})",
        f"missing at run time: {', '.join(lib.missing_in_runtime)}",
    ]
