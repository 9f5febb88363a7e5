"""Toolchain checks: facts about nvcc, ninja, the host compiler, the trial link and libstdc++ turned into
findings for a backend, and the exact ELF check of a built module against the runtime libstdc++.

Only FlashInfer's nvcc era compiles and links on the host; its CuTeDSL era, Triton and PyTorch need none of
this, so they get no toolchain findings. Fixes are filled with what the probes found on this machine (a
directory that really holds libcuda.so, a toolkit that really has headers); a fix whose facts are missing is
dropped, not shown with a hole in it.
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from jitguard.facts import FactUnavailable, elf
from jitguard.facts.libstdcxx import FIRST_GCC_WITH, SONAME, LibstdcxxFacts
from jitguard.findings.catalog import make
from jitguard.findings.checks_jitguard import unit
from jitguard.findings.model import Finding

if TYPE_CHECKING:
    from jitguard.facts import Facts
    from jitguard.facts.cuda_homes import CudaHome
    from jitguard.facts.libcuda import LinkFacts
    from jitguard.facts.libcuda_candidates import LibCandidate
    from jitguard.facts.toolchain import ToolchainFacts

BACKEND = "flashinfer"
# FlashInfer's SM90 GDN kernel needs TMA tensor-map instructions that nvcc < 12.6 lacks (FACTS.md).
MIN_NVCC_FOR_GDN_SM90 = (12, 6)
# Eras of FlashInfer (facts.flashinfer.era, system engineer) in which nothing is compiled on the host.
_NO_HOST_BUILD_ERAS = ("cutedsl", "none", "too-old")
# Newest GLIBCXX_3.4.N each GCC major ships (libstdc++ manual, ABI policy): a g++-M is safe for a runtime
# libstdc++ whose newest version is at least this.
_GCC_MAJOR_NEWEST = {8: 25, 9: 28, 10: 28, 11: 29, 12: 30, 13: 32, 14: 33, 15: 34}
# Where the symlink recipes put a `lib<name>.so` for a versioned-only library.
_LINK_DIR = "$HOME/.local/lib/jitguard-{library}"


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


def params_for(code: str, facts: Facts) -> dict[str, Any]:
    """Template fields for a toolchain ``code`` from the facts, for findings built elsewhere (e.g. from a
    build log by ``classify``): ``make(code, evidence=..., **params_for(code, facts))``."""
    tc, link, lib = facts.toolchain, facts.link, facts.libstdcxx
    if code in ("link-missing-libcuda", "link-missing-libcudart"):
        return link_params(code.removeprefix("link-missing-lib"), link, tc)
    if code == "nvcc-missing":
        return nvcc_params(tc)
    if code == "nvcc-too-old":
        return nvcc_params(tc, newer=True)
    if code == "cuda-headers-missing":
        return header_params(tc)
    if code == "cxx-missing":
        return cxx_params(tc)
    if code == "ninja-missing":
        return {"path": tc.search_path}
    if code == "libstdcxx-runtime-older":
        return libstdcxx_params(lib, tc)
    if code == "so-glibcxx-missing":
        return glibcxx_fix_params(lib.missing_in_runtime, lib, tc.cxx_alternatives)
    return {}


def link_params(library: str, link: LinkFacts, tc: ToolchainFacts) -> dict[str, Any]:
    """Template fields for ``link-missing-lib{library}`` from the trial link and the fix search."""
    trial = link.trial(library)
    params: dict[str, Any] = {
        "link_command": link.link_command,
        "cuda_home": tc.cuda_home,
        "cuda_home_source": tc.cuda_home_source,
        "detail": _first_line(trial.output, f"-l{library}") or trial.status,
    }
    if tc.nvcc_release:
        params["cuda_major"], params["cuda_minor"] = tc.nvcc_release
    dirs = link.fix_dirs(library)
    versioned = sorted(link.versioned_only(library), key=lambda c: (c.kind != "driver", c.path))
    if dirs:
        params["fix_dir"] = _sh(dirs[0])
        params["fix_kind"] = _kind_text(link, library, dirs[0])
    elif versioned:
        params["so_path"] = _sh(versioned[0].path)
        params["link_dir"] = _LINK_DIR.format(library=library)
    params["found"] = _found_sentence(library, dirs, versioned)
    if library == "cudart":
        home = _pick_home(tc, lambda h: h.cudart_in_lib64 and h.has_headers and h.has_nvcc)
        if home is not None:
            params["found_home"] = _sh(home.path)
    return params


def glibcxx_fix_params(
    missing: Sequence[str], runtime: LibstdcxxFacts | None, cxx_alternatives: Sequence[str] = ()
) -> dict[str, Any]:
    """Template fields for ``so-glibcxx-missing``: the missing versions, a libstdc++ that has them (for
    LD_PRELOAD), the GCC release that first ships them, and a compiler no newer than the runtime's libstdc++."""
    params: dict[str, Any] = {"missing": ", ".join(missing)}
    glibcxx = elf.versions_with_prefix(missing, "GLIBCXX")
    if glibcxx and glibcxx[-1] in FIRST_GCC_WITH:
        params["gcc_needed"] = FIRST_GCC_WITH[glibcxx[-1]]
    if runtime is not None:
        if runtime.runtime_lib:
            params["runtime_lib"] = runtime.runtime_lib
        if runtime.compiler_lib and set(missing) <= set(runtime.compiler_versions):
            params["preload_lib"] = _sh(runtime.compiler_lib)
        alt = _compiler_for_runtime(runtime.runtime_max, cxx_alternatives)
        if alt:
            params["alt_cxx"] = _sh(alt)
    return params


def libstdcxx_params(lib: LibstdcxxFacts, tc: ToolchainFacts) -> dict[str, Any]:
    missing = lib.missing_in_runtime
    params = glibcxx_fix_params(missing, lib, tc.cxx_alternatives)
    params.update(
        cxx=shlex.join(tc.cxx.command),
        compiler_lib=lib.compiler_lib,
        compiler_max=lib.compiler_max,
        runtime_max=lib.runtime_max,
        runtime_source=lib.runtime_source,
        first_missing=missing[0] if missing else "",
    )
    if lib.compiler_lib:
        params["compiler_lib"] = _sh(lib.compiler_lib)
    runtime_major = _gcc_major_for(lib.runtime_max)
    if runtime_major is not None:
        params["runtime_gcc"] = str(runtime_major)
    return params


def nvcc_params(tc: ToolchainFacts, *, newer: bool = False) -> dict[str, Any]:
    params: dict[str, Any] = {
        "nvcc": shlex.join(tc.nvcc.command) or "(empty)",
        "cuda_home": tc.cuda_home or "(unresolved)",
        "cuda_home_source": tc.cuda_home_source,
        "detail": tc.nvcc.error or "",
        "nvcc_version": tc.nvcc.version or "?",
        "nvcc_banner": tc.nvcc.banner or "",
    }

    def suitable(home: CudaHome) -> bool:
        if not home.has_nvcc:
            return False
        return not newer or _version_at_least(home.version, MIN_NVCC_FOR_GDN_SM90)

    home = _pick_home(tc, suitable)
    if home is not None:
        params["found_home"] = _sh(home.path)
        params["found_version"] = home.version or "?"
    return params


def header_params(tc: ToolchainFacts) -> dict[str, Any]:
    params: dict[str, Any] = {"header": "cuda_runtime.h", "cuda_home": tc.cuda_home or "(unresolved)"}
    home = _pick_home(tc, lambda h: h.has_headers)
    if home is not None:
        params["found_home"] = _sh(home.path)
    return params


def cxx_params(tc: ToolchainFacts) -> dict[str, Any]:
    params: dict[str, Any] = {"cxx": shlex.join(tc.cxx.command) or "(empty)", "detail": tc.cxx.error or ""}
    others = [p for p in tc.cxx_alternatives if p != tc.cxx.path]
    if others:
        params["alt_cxx"] = _sh(others[-1])
    return params


# Helpers.


def _pick_home(tc: ToolchainFacts, ok: Any) -> CudaHome | None:
    """A CUDA home other than the one FlashInfer uses now that passes ``ok``; nvcc's own toolkit first."""
    current = os.path.realpath(tc.cuda_home) if tc.cuda_home else None
    toolkit = os.path.realpath(tc.nvcc_toolkit_dir) if tc.nvcc_toolkit_dir else None
    homes = sorted(tc.cuda_homes, key=lambda h: os.path.realpath(h.path) != toolkit)
    for home in homes:
        if os.path.realpath(home.path) != current and ok(home):
            return home
    return None


def _kind_text(link: LinkFacts, library: str, directory: str) -> str:
    for cand in link.candidates:
        if cand.library == library and cand.directory == directory:
            return {"stub": "a link stub", "driver": "the driver library", "runtime": "the CUDA runtime"}.get(
                cand.kind, cand.kind
            ) + f", found via {cand.origin}"
    return "found on this machine"


def _found_sentence(library: str, dirs: Sequence[str], versioned: Sequence[LibCandidate]) -> str:
    name = f"lib{library}.so"
    if dirs:
        return f"A linkable {name} exists in: {', '.join(dirs)}."
    if versioned:
        paths = ", ".join(c.path for c in versioned)
        return f"Only versioned copies exist ({paths}); `-l{library}` needs {name}."
    where = (
        "the loader cache, driver directories, CUDA toolkits' stubs, conda and pip"
        if library == "cuda"
        else ("CUDA toolkits, conda, pip and the loader cache")
    )
    return f"No {name} exists anywhere jitguard looked ({where})."


def _first_line(output: str, needle: str) -> str | None:
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    for line in lines:
        if needle in line:
            return line
    return lines[-1] if lines else None


def _compiler_for_runtime(runtime_max: str | None, alternatives: Sequence[str]) -> str | None:
    """The newest ``g++-M`` on PATH whose libstdc++ needs nothing newer than ``runtime_max``."""
    if not runtime_max:
        return None
    limit = elf.version_tuple(runtime_max)
    best: tuple[int, str] | None = None
    for path in alternatives:
        m = re.fullmatch(r"g\+\+-(\d+)", os.path.basename(path))
        if not m or int(m.group(1)) not in _GCC_MAJOR_NEWEST:
            continue
        major = int(m.group(1))
        if (3, 4, _GCC_MAJOR_NEWEST[major]) <= limit and (best is None or major > best[0]):
            best = (major, path)
    return best[1] if best else None


def _gcc_major_for(glibcxx_max: str | None) -> int | None:
    """The newest GCC major whose libstdc++ needs nothing newer than ``glibcxx_max``."""
    if not glibcxx_max:
        return None
    limit = elf.version_tuple(glibcxx_max)
    majors = [m for m, n in _GCC_MAJOR_NEWEST.items() if (3, 4, n) <= limit]
    return max(majors) if majors else None


def _version_at_least(version: str | None, minimum: tuple[int, int]) -> bool:
    if not version:
        return False
    try:
        parts = tuple(int(p) for p in version.split(".")[:2])
    except ValueError:
        return False
    return parts >= minimum


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


def _sh(path: str) -> str:
    return shlex.quote(path)
