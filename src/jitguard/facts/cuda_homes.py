"""The CUDA toolkits on this machine, and the one FlashInfer 0.6.x takes as its CUDA_HOME.

FlashInfer (``jit/cpp_ext.py``) takes ``CUDA_HOME``, then ``CUDA_PATH``, then ``dirname(dirname(which nvcc))``,
then ``/usr/local/cuda``. The other toolkits found here (``/usr/local/cuda-*``, ``/opt/cuda``, a conda env) are
what a fix can point it at; each is described without running its nvcc.
"""

from __future__ import annotations

import glob
import json
import os
import re
import shutil
from collections.abc import Mapping
from dataclasses import dataclass

DEFAULT_CUDA_HOME = "/usr/local/cuda"
_CUDA_VERSION_MACRO = re.compile(r"^#define CUDA_VERSION (\d+)", re.MULTILINE)


@dataclass(frozen=True)
class CudaHome:
    """A CUDA toolkit directory on this machine (a candidate for ``CUDA_HOME``)."""

    path: str
    version: str | None
    has_nvcc: bool
    has_headers: bool
    cudart_in_lib64: bool
    cudart_in_lib: bool


def resolve_cuda_home(env: Mapping[str, str]) -> tuple[str | None, str]:
    """FlashInfer 0.6.x's ``get_cuda_path`` order, without its exception: ``(path or None, source)``."""
    for name in ("CUDA_HOME", "CUDA_PATH"):
        if env.get(name):
            return env[name], name
    nvcc = shutil.which("nvcc", path=env.get("PATH", os.defpath))
    if nvcc:
        # Not realpath: FlashInfer takes `which nvcc` literally, so a wrapper in /usr/local/bin gives
        # /usr/local.
        return os.path.dirname(os.path.dirname(nvcc)), "which nvcc"
    if os.path.exists(DEFAULT_CUDA_HOME):
        return DEFAULT_CUDA_HOME, "default"
    return None, "unresolved"


def find_cuda_homes(env: Mapping[str, str], extra: list[str | None]) -> tuple[CudaHome, ...]:
    """CUDA toolkits on this machine: the resolved/real ones, /usr/local/cuda*, /opt/cuda, a conda env's."""
    candidates: list[str] = [p for p in extra if p]
    candidates += [DEFAULT_CUDA_HOME, *sorted(glob.glob("/usr/local/cuda-*")), "/opt/cuda"]
    if env.get("CONDA_PREFIX"):
        candidates.append(env["CONDA_PREFIX"])
    homes: list[CudaHome] = []
    seen: set[str] = set()
    for path in candidates:
        real = os.path.realpath(path)
        if real in seen or not os.path.isdir(path):
            continue
        seen.add(real)
        home = _describe_cuda_home(path)
        if home.has_nvcc or home.has_headers or home.cudart_in_lib or home.cudart_in_lib64:
            homes.append(home)
    return tuple(homes)


def _describe_cuda_home(path: str) -> CudaHome:
    return CudaHome(
        path=path,
        version=_cuda_home_version(path),
        has_nvcc=os.path.isfile(os.path.join(path, "bin", "nvcc")),
        has_headers=os.path.isfile(os.path.join(path, "include", "cuda_runtime.h")),
        cudart_in_lib64=os.path.exists(os.path.join(path, "lib64", "libcudart.so")),
        cudart_in_lib=os.path.exists(os.path.join(path, "lib", "libcudart.so")),
    )


def _cuda_home_version(path: str) -> str | None:
    """The toolkit's version without running its nvcc: version.json, else CUDA_VERSION in cuda.h (pip layouts
    ship no version.json)."""
    try:
        with open(os.path.join(path, "version.json"), encoding="utf-8") as handle:
            return str(json.load(handle)["cuda"]["version"])
    except (OSError, ValueError, KeyError, TypeError):
        pass
    for header in [
        os.path.join(path, "include", "cuda.h"),
        *glob.glob(os.path.join(path, "targets", "*", "include", "cuda.h")),
    ]:
        try:
            with open(header, encoding="utf-8", errors="replace") as handle:
                m = _CUDA_VERSION_MACRO.search(handle.read())
        except OSError:
            continue
        if m:
            number = int(m.group(1))
            return f"{number // 1000}.{(number % 1000) // 10}"
    return None
