"""`jitguard doctor --compile`'s probe module: real nvcc, real FlashInfer link line, through the real runner,
and what it reports it compiled, linked and loaded."""

from __future__ import annotations

import dataclasses
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from jitguard.facts import Facts, collect
from jitguard.facts.gpu import GpuDevice
from jitguard.flashinfer_jit.probe_module import ProbeResult, gencode, run_probe
from jitguard.supervise.runner import BuildOptions

PATH = "/usr/local/bin:/usr/bin:/bin"


def options(tmp_path: Path) -> BuildOptions:
    return BuildOptions(cache_dir=tmp_path / "cache", progress="none", timeout=300, stall_timeout=120)


def outcomes(result: ProbeResult) -> dict[str, str]:
    return {step.name: step.outcome for step in result.steps}


def probe(tmp_path: Path, facts: Facts) -> ProbeResult:
    return run_probe(facts, options(tmp_path), directory=tmp_path / "probe")


def fixed(tmp_path: Path, stubs: Path) -> Facts:
    """This machine with the fix applied: the toolkit's libcudart and a libcuda link stub."""
    env = {
        "PATH": PATH,
        "HOME": str(tmp_path),
        "CUDA_HOME": "/usr/local/cuda",
        "FLASHINFER_EXTRA_LDFLAGS": f"-L{stubs}",
    }
    return collect(env, cache_dir=tmp_path / "c")


def on_a_gpu_host(facts: Facts) -> Facts:
    """The same facts as a host with one Hopper GPU would have: the probe then loads what it built (a real
    load, in a real process, of the real library)."""
    h200 = GpuDevice(0, "NVIDIA H200", 9, 0, 141 * 1024**3, None)
    return dataclasses.replace(facts, gpu=dataclasses.replace(facts.gpu, devices=(h200,), reason=None))


def test_gencode_follows_flashinfer_arch_notation() -> None:
    assert gencode("9.0a") == "-gencode=arch=compute_90a,code=sm_90a"
    assert gencode("10.0") == "-gencode=arch=compute_100,code=sm_100"


def test_probe_fails_at_the_real_link_here_and_says_the_compile_worked(tmp_path: Path) -> None:
    env = {"PATH": PATH, "HOME": str(tmp_path), "CUDA_HOME": "/usr/local/cuda-13.0"}
    result = probe(tmp_path, collect(env, cache_dir=tmp_path / "c"))
    assert outcomes(result) == {"compile": "done", "link": "failed", "check": "not-run", "load": "not-run"}
    link = result.step("link")
    assert link is not None and "cannot find -lcuda" in link.detail  # the linker's own words
    assert link.command is not None and "-lcudart -lcuda" in link.command
    assert result.link_libraries == ("cudart", "cuda")
    assert "/usr/local/cuda-13.0/lib64/stubs" in result.link_dirs
    assert result.so_path is None and result.to_json()["library"] is None
    assert (tmp_path / "probe" / "probe.cuda.o").exists()  # nvcc really compiled; only the link failed
    assert result.log_path is not None and result.log_path.exists()


def test_the_link_failure_names_this_machines_fix_as_pre_flight_does(tmp_path: Path) -> None:
    """No -lcudart under CUDA_HOME=/usr/local (from `which nvcc`), one toolkit that has it: the fix says so."""
    env = {"PATH": PATH, "HOME": str(tmp_path)}
    result = probe(tmp_path, collect(env, cache_dir=tmp_path / "c"))
    cudart = next(f for f in result.findings if f.code == "link-missing-libcudart")
    assert "(unknown)" not in cudart.cause
    assert cudart.fixes[0].command == "export CUDA_HOME=/usr/local/cuda-13.0"


def test_probe_passes_once_the_fix_is_applied_and_reports_the_library(
    tmp_path: Path, stub_libcuda_dir: Path
) -> None:
    result = probe(tmp_path, fixed(tmp_path, stub_libcuda_dir))
    assert [f.code for f in result.findings] == ["compile-probe-passed"], result.findings
    assert outcomes(result) == {"compile": "done", "link": "done", "check": "done", "load": "not-run"}
    load = result.step("load")
    assert load is not None and "no NVIDIA driver" in load.detail
    assert result.so_path is not None and result.kept
    assert result.so_bytes == result.so_path.stat().st_size
    needed = subprocess.run(["readelf", "-d", str(result.so_path)], capture_output=True, text=True).stdout
    assert "libcuda.so.1" in needed and "libcudart" in needed  # linked like a FlashInfer module
    assert "libcuda.so.1" in result.needed and any(n.startswith("libcudart") for n in result.needed)


def test_a_temporary_probe_directory_is_removed_and_the_report_says_so(
    tmp_path: Path, stub_libcuda_dir: Path
) -> None:
    result = run_probe(fixed(tmp_path, stub_libcuda_dir), options(tmp_path))
    assert result.so_path is not None and not result.so_path.exists()
    assert result.to_json()["library"]["kept"] is False and result.so_bytes


def test_with_a_driver_the_probe_loads_its_library_for_real(
    tmp_path: Path, stub_libcuda_builder: Callable[..., Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    driver = stub_libcuda_builder(tmp_path / "driver", layout="driver")  # libcuda.so.1, as a driver has it
    monkeypatch.setenv("LD_LIBRARY_PATH", f"{driver}:/usr/local/cuda/lib64")
    result = probe(tmp_path, on_a_gpu_host(fixed(tmp_path, driver)))
    assert outcomes(result)["load"] == "done", result.steps
    assert [f.code for f in result.findings] == ["compile-probe-passed"]


def test_a_library_that_does_not_load_is_reported_with_the_loaders_words(
    tmp_path: Path, stub_libcuda_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LD_LIBRARY_PATH", "/usr/local/cuda/lib64")  # libcudart, but no libcuda.so.1 anywhere
    result = probe(tmp_path, on_a_gpu_host(fixed(tmp_path, stub_libcuda_dir)))
    load = result.step("load")
    assert load is not None and load.outcome == "failed" and "libcuda.so.1" in load.detail
    (failed,) = result.findings
    assert failed.code == "compile-probe-load-failed" and "libcuda.so.1" in failed.cause
