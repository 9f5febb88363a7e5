"""`jitguard doctor --compile`: a real supervised build of a small probe module, the way FlashInfer builds its
JIT modules (nvcc for the arch FlashInfer targets, FlashInfer's link line with -lcudart -lcuda and
FLASHINFER_EXTRA_LDFLAGS), then the exact GLIBCXX check and, where a driver exists, a real load in a
subprocess. It proves in seconds what a 34-TU GDN build would only tell after minutes.
"""

from __future__ import annotations

import dataclasses
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from jitguard.errors import BuildFailed
from jitguard.facts.elf import ElfReadError, dynamic_info
from jitguard.facts.libcuda import link_flags
from jitguard.findings.catalog import make
from jitguard.findings.checks_toolchain import check_built_library
from jitguard.findings.classify import classify
from jitguard.findings.model import Finding
from jitguard.supervise.runner import run_ninja

if TYPE_CHECKING:
    from jitguard.facts import Facts
    from jitguard.supervise.build_options import BuildOptions

MODULE = "jitguard_compile_probe"
_OBJECT = "probe.cuda.o"
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
class ProbeStep:
    """One step of the probe and how it ended: ``done``, ``failed`` or ``not-run`` (``detail`` says why)."""

    name: Literal["compile", "link", "check", "load"]
    outcome: Literal["done", "failed", "not-run"]
    detail: str
    command: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "outcome": self.outcome, "detail": self.detail, "command": self.command}


@dataclass(frozen=True)
class ProbeResult:
    """What the probe built, linked and loaded. ``so_path`` is where the library was built (None: it was
    not); ``kept`` whether it is still there (a temporary probe directory is removed). ``findings`` are the
    classified failures, or one ``compile-probe-passed``."""

    findings: tuple[Finding, ...]
    so_path: Path | None
    seconds: float
    log_path: Path | None
    arch: str = DEFAULT_ARCH
    steps: tuple[ProbeStep, ...] = ()
    so_bytes: int | None = None
    needed: tuple[str, ...] = ()  # the library's DT_NEEDED entries: what the loader will look for
    link_libraries: tuple[str, ...] = ()  # the link line's -l names
    link_dirs: tuple[str, ...] = ()  # the link line's -L directories
    kept: bool = False
    flashinfer: str | None = None  # FlashInfer's version; None: not installed, its flags are jitguard's copy

    def step(self, name: str) -> ProbeStep | None:
        return next((s for s in self.steps if s.name == name), None)

    def to_json(self) -> dict[str, Any]:
        return {
            "arch": self.arch,
            "flashinfer": self.flashinfer,
            "seconds": round(self.seconds, 3),
            "log_path": None if self.log_path is None else str(self.log_path),
            "steps": [s.to_json() for s in self.steps],
            "library": None
            if self.so_path is None
            else {
                "path": str(self.so_path),
                "bytes": self.so_bytes,
                "kept": self.kept,
                "needed": list(self.needed),
            },
            "link": {"libraries": list(self.link_libraries), "search_dirs": list(self.link_dirs)},
            "findings": [f.to_json() for f in self.findings],
        }


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


@dataclass(frozen=True)
class _Project:
    ninja_file: Path
    compile_command: str
    link_command: str
    ldflags: tuple[str, ...]


def write_project(directory: Path, facts: Facts, arch: str) -> _Project:
    """The probe's source and build.ninja in ``directory``, and the two commands it runs."""
    tc, link = facts.toolchain, facts.link
    cuda_home = tc.cuda_home or "/usr/local/cuda"
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "probe.cu").write_text(_SOURCE)
    nvcc = " ".join(shlex.quote(p) for p in tc.nvcc.command)
    cxx = " ".join(shlex.quote(p) for p in tc.cxx.command)
    flags = tuple(link_flags(cuda_home, link.extra_ldflags))
    ldflags = " ".join(shlex.quote(f) for f in flags)
    cuda_cflags = f"--compiler-options=-fPIC -O2 {gencode(arch)} -isystem {shlex.quote(cuda_home)}/include"
    source = directory / "probe.cu"
    lines = [
        "ninja_required_version = 1.3",
        f"nvcc = {nvcc}",
        f"cxx = {cxx}",
        f"cuda_cflags = {cuda_cflags}",
        f"ldflags = {ldflags}",
        "rule cuda_compile",
        "  command = $nvcc $cuda_cflags -c $in -o $out",
        "rule link",
        "  command = $cxx $in $ldflags -o $out",
        f"build {_OBJECT}: cuda_compile {source}",
        f"build {MODULE}.so: link {_OBJECT}",
        f"default {MODULE}.so",
        "",
    ]
    ninja_file = directory / "build.ninja"
    ninja_file.write_text("\n".join(lines))
    return _Project(
        ninja_file,
        f"{nvcc} {cuda_cflags} -c {source} -o {_OBJECT}",
        f"{cxx} {_OBJECT} {ldflags} -o {MODULE}.so",
        flags,
    )


def run_probe(facts: Facts, options: BuildOptions, *, directory: Path | None = None) -> ProbeResult:
    """Build, check and (with a driver) load the probe; see ``ProbeResult``. ``directory`` is kept; a
    temporary one is not (the log stays in jitguard's cache dir)."""
    start = time.perf_counter()
    workdir = directory or Path(tempfile.mkdtemp(prefix="jitguard-compile-probe-"))
    try:
        result = _build_check_load(facts, dataclasses.replace(options, facts=facts), workdir, start)
    finally:
        if directory is None:
            shutil.rmtree(workdir, ignore_errors=True)
    return dataclasses.replace(result, kept=result.so_path is not None and result.so_path.exists())


def _build_check_load(facts: Facts, options: BuildOptions, workdir: Path, start: float) -> ProbeResult:
    arch = probe_arch(facts)
    project = write_project(workdir, facts, arch)
    base: dict[str, Any] = {
        "arch": arch,
        "link_libraries": tuple(f[2:] for f in project.ldflags if f.startswith("-l")),
        "link_dirs": tuple(f[2:] for f in project.ldflags if f.startswith("-L")),
        "flashinfer": facts.flashinfer.version if facts.flashinfer.installed else None,
    }
    compiled = f"{_OBJECT} for {gencode(arch).rpartition('=')[2]}"
    try:
        result = run_ninja(workdir, project.ninja_file, module=MODULE, options=options)
    except BuildFailed as exc:
        why = _error_lines(exc)
        objects = (workdir / _OBJECT).exists()
        steps = (
            ProbeStep(
                "compile",
                "done" if objects else "failed",
                compiled if objects else why,
                project.compile_command,
            ),
            ProbeStep(
                "link",
                "failed" if objects else "not-run",
                why if objects else "the compile failed",
                project.link_command,
            ),
            ProbeStep("check", "not-run", "no library was built"),
            ProbeStep("load", "not-run", "no library was built"),
        )
        log_path = Path(exc.log_path) if exc.log_path else None
        return ProbeResult(exc.findings, None, time.perf_counter() - start, log_path, steps=steps, **base)
    so = workdir / f"{MODULE}.so"
    size, needed = _library(so)
    found, check, load = _check_and_load(so, facts, str(result.log_path))
    steps = (
        ProbeStep("compile", "done", compiled, project.compile_command),
        ProbeStep(
            "link",
            "done",
            f"{so.name} ({size} bytes)",
            project.link_command,
        ),
        check,
        load,
    )
    if not found:
        found.append(
            make(
                "compile-probe-passed",
                backend="flashinfer",
                evidence=[
                    f"built {so} for {arch} in {result.wall_s:.1f} s; {load.detail}",
                    f"log: {result.log_path}",
                ],
                arch=arch,
            )
        )
    seconds = time.perf_counter() - start
    return ProbeResult(
        tuple(found), so, seconds, result.log_path, steps=steps, so_bytes=size, needed=needed, **base
    )


def _check_and_load(so: Path, facts: Facts, log_path: str) -> tuple[list[Finding], ProbeStep, ProbeStep]:
    """The exact GLIBCXX check, then (with a driver, and only when the check passed) a real load."""
    found = list(check_built_library(so, facts.libstdcxx))
    blocking = [f for f in found if f.blocking]
    if blocking:
        check = ProbeStep("check", "failed", blocking[0].title)
        return found, check, ProbeStep("load", "not-run", "the library would not load here (check)")
    runtime = facts.libstdcxx.runtime_lib or "this process's libstdc++"
    check = ProbeStep("check", "done", f"its GLIBCXX needs are met by {runtime}")
    if not facts.gpu.present:
        return found, check, ProbeStep("load", "not-run", "no NVIDIA driver here; building needs none")
    failure = _load_in_subprocess(so)
    if failure is None:
        return found, check, ProbeStep("load", "done", "loaded in a fresh process")

    lines = [line.strip() for line in failure.splitlines() if line.strip()]
    error = lines[-1] if lines else "the loader failed"  # the exception's own line ends the traceback
    known = classify(failure, 1, backend="flashinfer", facts=facts, log_path=log_path)
    found += [f for f in known if f.code != "build-failed"] or [
        make("compile-probe-load-failed", backend="flashinfer", evidence=lines[-3:], error=error, so_path=so)
    ]
    return found, check, ProbeStep("load", "failed", error)


def _library(so: Path) -> tuple[int | None, tuple[str, ...]]:
    """The library's size and DT_NEEDED entries (empty when it cannot be read as ELF)."""
    try:
        size = so.stat().st_size
    except OSError:
        return None, ()
    try:
        return size, dynamic_info(so).needed
    except (ElfReadError, OSError):
        return size, ()


def _error_lines(exc: BuildFailed) -> str:
    """The failed command's own error lines from the log (after ninja's FAILED: line and the command it
    echoes); else the first finding's title."""
    lines: list[str] = []
    try:
        text = Path(exc.log_path).read_text(errors="replace").splitlines() if exc.log_path else []
    except OSError:
        text = []
    failed = next((i for i, line in enumerate(text) if line.startswith("FAILED:")), None)
    if failed is not None:
        for line in text[failed + 2 :]:
            if line.startswith(("ninja:", "jitguard:")):
                break
            if line.strip():
                lines.append(line.strip())
    if lines:
        return " / ".join(lines[:3])
    return exc.findings[0].title if exc.findings else str(exc).splitlines()[0]


def _load_in_subprocess(so: Path) -> str | None:
    """None when the module loads in a fresh interpreter, else the loader's error text."""
    proc = subprocess.run(
        [sys.executable, "-c", "import ctypes, sys; ctypes.CDLL(sys.argv[1])", str(so)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    return None if proc.returncode == 0 else proc.stderr
