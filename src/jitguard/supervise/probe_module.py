"""`jitguard doctor --compile`: a real supervised build of a small probe module, the way FlashInfer builds its
JIT modules (nvcc for the arch FlashInfer targets, FlashInfer's link line with -lcudart -lcuda and
FLASHINFER_EXTRA_LDFLAGS), then the exact GLIBCXX check and, where a driver exists, a real load in a
subprocess. It proves in seconds what a 34-TU GDN build would only tell after minutes.
"""

from __future__ import annotations

import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from jitguard.errors import BuildFailed
from jitguard.findings.catalog import make
from jitguard.findings.model import Finding

if TYPE_CHECKING:
    from jitguard.facts import Facts
    from jitguard.supervise.runner import BuildOptions

MODULE = "jitguard_compile_probe"
DEFAULT_ARCH = "9.0a"  # FlashInfer's GDN prefill target (SM90) when neither the env nor a GPU says otherwise

# A kernel, a runtime API call and a driver API call: the .so needs libcudart and libcuda like FlashInfer's.
_SOURCE = r"""
#include <cuda.h>
#include <cuda_runtime.h>

__global__ void jitguard_probe_kernel(float* out) { out[threadIdx.x] = threadIdx.x * 2.0f; }

extern "C" int jitguard_probe_versions(int* runtime, int* driver) {
  cudaRuntimeGetVersion(runtime);
  return static_cast<int>(cuDriverGetVersion(driver));
}

extern "C" int jitguard_probe_launch(float* out) {
  jitguard_probe_kernel<<<1, 32>>>(out);
  return static_cast<int>(cudaGetLastError());
}
"""


@dataclass(frozen=True)
class ProbeResult:
    findings: tuple[Finding, ...]
    so_path: Path | None
    seconds: float
    log_path: Path | None


def gencode(arch: str) -> str:
    """'9.0a' -> '-gencode=arch=compute_90a,code=sm_90a' (FlashInfer's arch notation)."""
    digits = arch.replace(".", "")
    return f"-gencode=arch=compute_{digits},code=sm_{digits}"


def probe_arch(facts: Facts) -> str:
    if facts.flashinfer.arch_list:
        return facts.flashinfer.arch_list[0]
    if facts.gpu.devices and facts.gpu.devices[0].major is not None:
        d = facts.gpu.devices[0]
        return f"{d.major}.{d.minor}{'a' if (d.major or 0) >= 9 else ''}"
    return DEFAULT_ARCH


def write_project(directory: Path, facts: Facts, arch: str) -> Path:
    """The probe's source and build.ninja in ``directory``; returns the ninja file."""
    from jitguard.facts.libcuda import link_flags

    tc, link = facts.toolchain, facts.link
    cuda_home = tc.cuda_home or "/usr/local/cuda"
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "probe.cu").write_text(_SOURCE)
    nvcc = " ".join(shlex.quote(p) for p in tc.nvcc.command)
    cxx = " ".join(shlex.quote(p) for p in tc.cxx.command)
    ldflags = " ".join(shlex.quote(f) for f in link_flags(cuda_home, link.extra_ldflags))
    lines = [
        "ninja_required_version = 1.3",
        f"nvcc = {nvcc}",
        f"cxx = {cxx}",
        f"cuda_cflags = --compiler-options=-fPIC -O2 {gencode(arch)} -isystem {shlex.quote(cuda_home)}/include",
        f"ldflags = {ldflags}",
        "rule cuda_compile",
        "  command = $nvcc $cuda_cflags -c $in -o $out",
        "rule link",
        "  command = $cxx $in $ldflags -o $out",
        f"build probe.cuda.o: cuda_compile {directory / 'probe.cu'}",
        f"build {MODULE}.so: link probe.cuda.o",
        f"default {MODULE}.so",
        "",
    ]
    ninja_file = directory / "build.ninja"
    ninja_file.write_text("\n".join(lines))
    return ninja_file


def run_probe(facts: Facts, options: BuildOptions, *, directory: Path | None = None) -> ProbeResult:
    """Build, check and (with a driver) load the probe. Findings are the classified failures, or one
    ``compile-probe-passed`` info finding with what was proven. ``directory`` is kept; a temporary one is not.
    """
    start = time.perf_counter()
    workdir = directory or Path(tempfile.mkdtemp(prefix="jitguard-compile-probe-"))
    try:
        return _build_check_load(facts, options, workdir, start)
    finally:
        if directory is None:
            shutil.rmtree(workdir, ignore_errors=True)  # the log stays in jitguard's cache dir


def _build_check_load(facts: Facts, options: BuildOptions, workdir: Path, start: float) -> ProbeResult:
    from jitguard.findings.checks_toolchain import check_built_library
    from jitguard.supervise.runner import run_ninja

    arch = probe_arch(facts)
    ninja_file = write_project(workdir, facts, arch)
    try:
        result = run_ninja(workdir, ninja_file, module=MODULE, options=options)
    except BuildFailed as exc:
        return ProbeResult(exc.findings, None, time.perf_counter() - start, Path(exc.log_path or workdir))
    so = workdir / f"{MODULE}.so"
    found = list(check_built_library(so, facts.libstdcxx))
    load_note = "not loaded: no NVIDIA driver here (the build needs none)"
    if facts.gpu.present and not found:
        failure = _load_in_subprocess(so)
        if failure is not None:
            from jitguard.findings.classify import classify

            found += classify(failure, 1, backend="flashinfer", facts=facts, log_path=str(result.log_path))
        else:
            load_note = "loaded in a fresh process"
    if not found:
        found.append(
            make(
                "compile-probe-passed",
                backend="flashinfer",
                evidence=[
                    f"built {so} for {arch} in {result.wall_s:.1f} s, {load_note}",
                    f"log: {result.log_path}",
                ],
                arch=arch,
            )
        )
    return ProbeResult(tuple(found), so, time.perf_counter() - start, result.log_path)


def _load_in_subprocess(so: Path) -> str | None:
    """None when the module loads in a fresh interpreter, else the loader's error text."""
    proc = subprocess.run(
        [sys.executable, "-c", "import ctypes, sys; ctypes.CDLL(sys.argv[1])", str(so)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    return None if proc.returncode == 0 else proc.stderr
