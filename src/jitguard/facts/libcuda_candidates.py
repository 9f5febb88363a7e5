"""Where on this machine a libcuda or libcudart lives that FlashInfer's JIT link could use: the fixes
``facts.libcuda``'s trial link proposes when ``-lcuda`` or ``-lcudart`` fails.

Searched: the toolkits nvcc and CUDA_HOME name (and their link stubs), other CUDA installs, conda, pip's
``nvidia-*`` wheels of this interpreter, the driver's usual directories and the loader cache. A directory with
only a versioned ``libcuda.so.1`` is a candidate too, linkable after a symlink.
"""

from __future__ import annotations

import contextlib
import glob
import os
import re
import site
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from jitguard.facts import ldcache
from jitguard.facts.toolchain import ToolchainFacts

_DRIVER_DIRS = (
    f"/usr/lib/{ldcache.multiarch_dir()}",
    f"/lib/{ldcache.multiarch_dir()}",
    "/usr/lib64",
    "/usr/local/nvidia/lib64",
    "/usr/local/nvidia/lib",
    "/usr/lib/wsl/lib",
)
# Order in which a found directory is proposed as the fix: the toolkit's own files first (they match the nvcc
# that compiled the objects), then other installs; a driver library only after every stub.
_ORIGIN_RANK = {
    "toolkit": 0,
    "cuda_home": 1,
    "cuda install": 2,
    "conda": 3,
    "pip": 4,
    "driver dir": 5,
    "ldconfig": 6,
}


@dataclass(frozen=True)
class LibCandidate:
    """A directory holding ``lib<library>.so*``. ``linkable``: it has the unversioned ``lib<library>.so`` that
    ``-l<library>`` needs (a directory with only ``libcuda.so.1`` needs a ``libcuda.so`` symlink first)."""

    library: str
    path: str
    directory: str
    kind: str  # "driver", "stub" or "runtime"
    origin: str  # "toolkit", "cuda_home", "cuda install", "conda", "pip", "driver dir", "ldconfig"
    linkable: bool


def fix_order(candidate: LibCandidate) -> tuple[bool, int]:
    """Sort key of a candidate proposed as the fix: every stub before a driver library, then by origin."""
    return candidate.kind == "driver", _ORIGIN_RANK.get(candidate.origin, 9)


def find_candidates(toolchain: ToolchainFacts, env: Mapping[str, str]) -> tuple[LibCandidate, ...]:
    """Every directory on this machine holding a libcuda or libcudart the link could use."""
    found: list[LibCandidate] = []
    homes: list[tuple[str, str]] = []
    if toolchain.nvcc_toolkit_dir:
        homes.append((toolchain.nvcc_toolkit_dir, "toolkit"))
    if toolchain.cuda_home:
        homes.append((toolchain.cuda_home, "cuda_home"))
    homes += [(h.path, "cuda install") for h in toolchain.cuda_homes]
    conda = env.get("CONDA_PREFIX")

    # libcuda: link stubs in toolkits, conda and pip; the driver's own library.
    for home, origin in homes:
        for d in [f"{home}/lib64/stubs", f"{home}/lib/stubs", *glob.glob(f"{home}/targets/*/lib/stubs")]:
            found += _scan(d, "cuda", "stub", origin)
    if conda:
        for d in [f"{conda}/lib/stubs", *glob.glob(f"{conda}/targets/*/lib/stubs")]:
            found += _scan(d, "cuda", "stub", "conda")
        found += _scan(f"{conda}/lib", "cuda", "driver", "conda")
    for d in _pip_nvidia_lib_dirs():
        found += _scan(d, "cuda", "stub" if d.endswith("stubs") else "driver", "pip")
    for d in _DRIVER_DIRS:
        found += _scan(d, "cuda", "driver", "driver dir")
    cache = ldcache.entries()
    for entry in cache:
        if is_lib_file(entry.name, "cuda"):
            found += _scan(os.path.dirname(entry.path), "cuda", "driver", "ldconfig")

    # libcudart: the toolkits' lib64 / lib (pip layouts have only lib/), conda, pip wheels.
    for home, origin in homes:
        for d in [f"{home}/lib64", f"{home}/lib", *glob.glob(f"{home}/targets/*/lib")]:
            found += _scan(d, "cudart", "runtime", origin)
    if conda:
        for d in [f"{conda}/lib", *glob.glob(f"{conda}/targets/*/lib")]:
            found += _scan(d, "cudart", "runtime", "conda")
    for d in _pip_nvidia_lib_dirs():
        found += _scan(d, "cudart", "runtime", "pip")
    for entry in cache:
        if is_lib_file(entry.name, "cudart"):
            found += _scan(os.path.dirname(entry.path), "cudart", "runtime", "ldconfig")

    unique: dict[tuple[str, str], LibCandidate] = {}
    for cand in found:
        # A stub directory found through several names (lib64 -> lib symlinks) is one candidate.
        unique.setdefault((cand.library, os.path.realpath(cand.directory)), cand)
    return tuple(unique.values())


def _scan(directory: str, library: str, kind: str, origin: str) -> list[LibCandidate]:
    try:
        names = [n for n in os.listdir(directory) if is_lib_file(n, library)]
    except OSError:
        return []
    if not names:
        return []
    unversioned = f"lib{library}.so"
    linkable = unversioned in names and os.path.exists(os.path.join(directory, unversioned))
    best = unversioned if linkable else max(names, key=lambda n: (len(n), n))
    if "stubs" in Path(directory).parts:
        kind = "stub"
    return [LibCandidate(library, os.path.join(directory, best), directory, kind, origin, linkable)]


def is_lib_file(name: str, library: str) -> bool:
    return re.fullmatch(rf"lib{re.escape(library)}\.so(?:\.\d+)*", name) is not None


def _pip_nvidia_lib_dirs() -> list[str]:
    """``site-packages/nvidia/*/lib`` (and ``lib/stubs``) of this interpreter: pip's CUDA wheels."""
    roots: list[str] = []
    # virtualenv's old site.py lacks getsitepackages.
    with contextlib.suppress(AttributeError):
        roots += site.getsitepackages()
    roots.append(site.getusersitepackages())
    roots += [p for p in sys.path if p.endswith(("site-packages", "dist-packages"))]
    dirs: list[str] = []
    for root in dict.fromkeys(roots):
        dirs += sorted(glob.glob(os.path.join(root, "nvidia", "*", "lib")))
        dirs += sorted(glob.glob(os.path.join(root, "nvidia", "*", "lib", "stubs")))
    return dirs
