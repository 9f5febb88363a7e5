"""`jitguard doctor --compile`'s probe module: real nvcc, real FlashInfer link line, through the real runner."""

from __future__ import annotations

import subprocess
from pathlib import Path

from jitguard.facts import collect
from jitguard.supervise.probe_module import gencode, run_probe
from jitguard.supervise.runner import BuildOptions


def options(tmp_path: Path) -> BuildOptions:
    return BuildOptions(cache_dir=tmp_path / "cache", progress="none", timeout=300, stall_timeout=120)


def test_gencode_follows_flashinfer_arch_notation() -> None:
    assert gencode("9.0a") == "-gencode=arch=compute_90a,code=sm_90a"
    assert gencode("10.0") == "-gencode=arch=compute_100,code=sm_100"


def test_probe_fails_at_the_real_link_here_with_the_classified_finding(tmp_path: Path) -> None:
    env = {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": str(tmp_path),
        "JITGUARD_CACHE_DIR": str(tmp_path / "c"),
    }
    facts = collect(env, cache_dir=tmp_path / "c")
    result = run_probe(facts, options(tmp_path), directory=tmp_path / "probe")
    codes = [f.code for f in result.findings]
    assert "link-missing-libcuda" in codes or "link-missing-libcudart" in codes, codes
    assert result.so_path is None
    assert (tmp_path / "probe" / "probe.cuda.o").exists()  # nvcc really compiled; only the link failed
    assert result.log_path is not None and Path(result.log_path).exists()


def test_probe_passes_once_the_fix_is_applied(tmp_path: Path, stub_libcuda_dir: Path) -> None:
    env = {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": str(tmp_path),
        "CUDA_HOME": "/usr/local/cuda",
        "FLASHINFER_EXTRA_LDFLAGS": f"-L{stub_libcuda_dir}",
    }
    facts = collect(env, cache_dir=tmp_path / "c")
    result = run_probe(facts, options(tmp_path), directory=tmp_path / "probe")
    assert [f.code for f in result.findings] == ["compile-probe-passed"], result.findings
    assert result.so_path is not None and result.so_path.exists()
    needed = subprocess.run(["readelf", "-d", str(result.so_path)], capture_output=True, text=True).stdout
    assert "libcuda.so.1" in needed and "libcudart" in needed  # linked like a FlashInfer module
