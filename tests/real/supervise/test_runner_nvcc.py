"""A real CUDA module (.cu -> .o -> .so with nvcc 13.0 and the host c++) built through the runner."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from jitguard.supervise.runner import BuildOptions, run_ninja

CUDA_HOME = Path("/usr/local/cuda")
KERNEL = """
extern "C" __global__ void jitguard_scale(float* x, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] *= 2.0f;
}
extern "C" int jitguard_scale_launch(float* x, int n) {
  jitguard_scale<<<(n + 255) / 256, 256>>>(x, n);
  return 0;
}
"""


def _manifest(nvcc: Path) -> str:
    # The shape of FlashInfer's generated file: nvcc/cxx variables, cuda_compile and link rules. No -lcuda.
    return "\n".join(
        [
            "ninja_required_version = 1.3",
            f"nvcc = {nvcc}",
            "cxx = c++",
            "cuda_cflags = -arch=sm_90a -O2 -Xcompiler -fPIC",
            "rule cuda_compile",
            "  command = $nvcc --generate-dependencies-with-compile --dependency-output $out.d $cuda_cflags "
            "-c $in -o $out",
            "  depfile = $out.d",
            "  deps = gcc",
            "rule link",
            "  command = $cxx $in -shared -o $out",
            "build scale.cuda.o: cuda_compile scale.cu",
            "build probe_cuda.so: link scale.cuda.o",
            "default probe_cuda.so",
            "",
        ]
    )


def test_real_nvcc_module_builds_through_the_runner(tmp_path: Path, cache_dir: Path) -> None:
    nvcc = CUDA_HOME / "bin" / "nvcc"
    if not nvcc.exists() or not shutil.which("c++"):
        pytest.skip("needs nvcc at /usr/local/cuda and a host c++")
    (tmp_path / "scale.cu").write_text(KERNEL)
    (tmp_path / "build.ninja").write_text(_manifest(nvcc))

    result = run_ninja(
        tmp_path, tmp_path / "build.ninja", module="probe_cuda", options=BuildOptions(progress="none")
    )

    library = tmp_path / "probe_cuda.so"
    assert result.attempts == 1 and library.exists()
    symbols = subprocess.run(["nm", "-D", str(library)], capture_output=True, text=True, check=True).stdout
    assert "jitguard_scale_launch" in symbols
    log = result.log_path.read_text()
    assert "jitguard.supervise.launcher" in log and "nvcc" in log  # the compile held a host-wide slot
    # A second run has nothing to do: the runner does not rebuild a finished module.
    again = run_ninja(
        tmp_path, tmp_path / "build.ninja", module="probe_cuda", options=BuildOptions(progress="none")
    )
    assert again.attempts == 0
