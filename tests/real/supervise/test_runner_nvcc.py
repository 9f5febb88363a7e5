"""A real CUDA module (.cu -> .o -> .so with nvcc 13.0 and the host c++) built through the runner."""

from __future__ import annotations

import subprocess
from pathlib import Path

import nvcc_project
from jitguard.supervise.runner import BuildOptions, run_ninja


def test_real_nvcc_module_builds_through_the_runner(tmp_path: Path, cache_dir: Path) -> None:
    nvcc_project.needs_nvcc()
    nvcc_project.write(tmp_path, units=1, name="probe_cuda")  # FlashInfer's manifest shape, no -lcuda

    result = run_ninja(
        tmp_path, tmp_path / "build.ninja", module="probe_cuda", options=BuildOptions(progress="none")
    )

    library = tmp_path / "probe_cuda.so"
    assert result.attempts == 1 and library.exists()
    symbols = subprocess.run(["nm", "-D", str(library)], capture_output=True, text=True, check=True).stdout
    assert "jitguard_launch_1" in symbols
    log = result.log_path.read_text()
    assert "jitguard.supervise.launcher" in log and "nvcc" in log  # the compile held a host-wide slot
    # A second run has nothing to do: the runner does not rebuild a finished module.
    again = run_ninja(
        tmp_path, tmp_path / "build.ninja", module="probe_cuda", options=BuildOptions(progress="none")
    )
    assert again.attempts == 0
