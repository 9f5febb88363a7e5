"""The parameters that fill a toolchain finding's fixes with what this machine has: a directory that really
holds libcuda.so, a toolkit that really has headers and a new enough nvcc, a g++ whose libstdc++ matches the
runtime's, the symlink recipe for a library found only versioned.

``params_for(code, facts)`` serves the classifier (a build log's finding gets the same fixes as pre-flight's
for the same cause); the ``*_params`` functions serve ``checks_toolchain``. A parameter whose fact is missing
is left out, so the catalog drops the fix that needs it.
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from jitguard.facts import elf
from jitguard.facts.libstdcxx import FIRST_GCC_WITH

if TYPE_CHECKING:
    from jitguard.facts import Facts
    from jitguard.facts.cuda_homes import CudaHome
    from jitguard.facts.libcuda import LinkFacts
    from jitguard.facts.libcuda_candidates import LibCandidate
    from jitguard.facts.libstdcxx import LibstdcxxFacts
    from jitguard.facts.toolchain import ToolchainFacts

# FlashInfer's SM90 GDN kernel needs TMA tensor-map instructions that nvcc < 12.6 lacks.
MIN_NVCC_FOR_GDN_SM90 = (12, 6)
# Newest GLIBCXX_3.4.N each GCC major ships (libstdc++ manual, ABI policy): a g++-M is safe for a runtime
# libstdc++ whose newest version is at least this.
_GCC_MAJOR_NEWEST = {8: 25, 9: 28, 10: 28, 11: 29, 12: 30, 13: 32, 14: 33, 15: 34}
# Where the symlink recipes put a `lib<name>.so` for a versioned-only library.
_LINK_DIR = "$HOME/.local/lib/jitguard-{library}"


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


def _sh(path: str) -> str:
    return shlex.quote(path)
