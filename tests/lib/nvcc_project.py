"""A small real CUDA project (a few .cu files compiled by nvcc, linked by the host c++) as a ninja manifest
in the shape of FlashInfer's generated ones, for the compiler-cache and artifact-store tests."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

CUDA_HOME = Path("/usr/local/cuda")
NVCC = CUDA_HOME / "bin" / "nvcc"
KERNEL = """
extern "C" __global__ void jitguard_scale_{i}(float* x, int n) {{
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] = x[i] * {i}.0f + 1.0f;
}}
extern "C" int jitguard_launch_{i}(float* x, int n) {{
  jitguard_scale_{i}<<<(n + 255) / 256, 256>>>(x, n);
  return 0;
}}
"""


def needs_nvcc() -> None:
    if not NVCC.exists() or not shutil.which("c++") or not shutil.which("ninja"):
        pytest.skip("needs nvcc at /usr/local/cuda, a host c++ and ninja")


def write(root: Path, *, units: int = 2, name: str = "fleet_probe") -> Path:
    """Write the project into ``root`` (created) and return its build.ninja. The library is ``<name>.so``."""
    root.mkdir(parents=True, exist_ok=True)
    lines = [
        "ninja_required_version = 1.3",
        f"nvcc = {NVCC}",
        "cxx = c++",
        "cuda_cflags = -arch=sm_90a -O2 -Xcompiler -fPIC",
        "rule cuda_compile",
        "  command = $nvcc --generate-dependencies-with-compile --dependency-output $out.d $cuda_cflags "
        "-c $in -o $out",
        "  depfile = $out.d",
        "  deps = gcc",
        "rule link",
        "  command = $cxx $in -shared -o $out",
    ]
    objects = []
    for i in range(units):
        (root / f"unit{i}.cu").write_text(KERNEL.format(i=i + 1))
        lines.append(f"build unit{i}.cuda.o: cuda_compile unit{i}.cu")
        objects.append(f"unit{i}.cuda.o")
    lines += [f"build {name}.so: link {' '.join(objects)}", f"default {name}.so", ""]
    manifest = root / "build.ninja"
    manifest.write_text("\n".join(lines))
    return manifest
