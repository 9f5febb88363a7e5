"""The image shapes people run FlashInfer in, through the real fact collection and decision code (``jitguard
doctor --engine vllm|sglang --json`` in a process of its own), each asserting the verdict per engine choice:

- a CUDA toolkit (nvcc 13.0 here, a real stub libcuda to link against);
- no toolkit, flashinfer-cubin 0.6.6: its files as the real wheel lays them out (the committed list
  tests/data/flashinfer-wheels/flashinfer_cubin-0.6.6.files, read from the wheel by extract.py there);
- no toolkit, flashinfer-jit-cache 0.6.6+cu129: every module of the committed list
  (flashinfer_jit_cache-0.6.6.modules, from flashinfer-python 0.6.6's own AOT module list), each a real ELF library;
- neither; and no toolkit with a workspace that holds one earlier build (FlashInfer's ``norm`` module);
- neither, with the real flashinfer-python 0.7.4 (CuTeDSL era, installed as test_flashinfer_cutedsl_era does).

FlashInfer is the installed 0.6.6 (GDN prefill is an nvcc module); the GPU an H200 as a stand-in ``nvidia-smi``
reports it; torch a CUDA build by its metadata (this machine's is a CPU build, which would block GDN in every
shape). What a path needs was read from the real wheels: flashinfer-cubin holds TRT-LLM-gen and DeepGEMM kernel
binaries for SM100/103 and no module, so on a Hopper GPU without a toolkit every nvcc module still has to compile;
a matching jit-cache holds them all; SGLang's GDN decode and verify are CuTeDSL kernels that need no toolkit.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from flashinfer_066 import flashinfer_version

SRC = Path(__file__).resolve().parents[2] / "src"
WHEELS = Path(__file__).resolve().parents[1] / "data" / "flashinfer-wheels"
VERSION = "0.6.6"
TOOLKIT = Path("/usr/local/cuda-13.0")
H200_SMI = "0, NVIDIA H200, 9.0, 580.95.05, 143771, GPU-6a1f0000-0000-0000-0000-000000000000"
VLLM_CHOICES = ("gdn-prefill", "sampler", "attention", "kv-cache", "moe", "flashinfer-ops")
NO_TOOLKIT = {"nvcc-missing", "link-missing-libcuda", "link-missing-libcudart"}

pytestmark = [
    pytest.mark.skipif(
        flashinfer_version() != VERSION,
        reason=f"the wheel lists are of {VERSION}; found {flashinfer_version()}",
    ),
    pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc for the libraries"),
]


@dataclass(frozen=True)
class Shape:
    toolkit: bool = False
    cubin: bool = False
    jit_cache: bool = False
    workspace: tuple[str, ...] = ()  # modules an earlier build left in FlashInfer's cached_ops


def listed(name: str) -> list[str]:
    return [line for line in (WHEELS / name).read_text().splitlines() if line and not line.startswith("#")]


def library(directory: Path, name: str) -> Path:
    """A real shared library (what FlashInfer loads for a module) built with gcc."""
    directory.mkdir(parents=True, exist_ok=True)
    source = directory / f"{name}.c"
    source.write_text("int jitguard_module(void) { return 1; }\n")
    path = directory / f"{name}.so"
    subprocess.run(["gcc", "-shared", "-fPIC", str(source), "-o", str(path)], check=True, timeout=60)
    source.unlink()
    return path


def dist_info(site: Path, name: str, version: str) -> None:
    info = site / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")


def install_cubin(site: Path) -> None:
    """flashinfer-cubin as its wheel installs (layout and version file; the listed cubins empty)."""
    dist_info(site, "flashinfer-cubin", VERSION)
    for name in listed(f"flashinfer_cubin-{VERSION}.files"):
        if ".dist-info/" in name:
            continue
        path = site / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f'__version__ = "{VERSION}"\n' if name.endswith("_build_meta.py") else "")


def install_jit_cache(site: Path, so: Path) -> int:
    """flashinfer-jit-cache as its wheel installs: every listed module at jit_cache/<name>/<name>.so."""
    dist_info(site, "flashinfer-jit-cache", f"{VERSION}+cu129")
    package = site / "flashinfer_jit_cache"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "_build_meta.py").write_text(f'__version__ = "{VERSION}+cu129"\n')
    modules = listed(f"flashinfer_jit_cache-{VERSION}.modules")
    for name in modules:
        (package / "jit_cache" / name).mkdir(parents=True)
        os.link(so, package / "jit_cache" / name / f"{name}.so")
    return len(modules)


@pytest.fixture(scope="module")
def module_library(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return library(tmp_path_factory.mktemp("so"), "module")


def image(
    root: Path, shape: Shape, so: Path, stubs: Path, *, flashinfer: Path | None = None
) -> dict[str, str]:
    """The environment of a process in an image of ``shape``, under ``root`` (``flashinfer``: a directory
    holding another flashinfer-python than the installed one)."""
    site = root / "site"
    dist_info(site, "torch", "2.13.0+cu130")  # the H200 host's torch build
    if shape.cubin:
        install_cubin(site)
    if shape.jit_cache:
        assert install_jit_cache(site, so) > 700  # the real list, not a handful
    for name in shape.workspace:
        built = root / "home" / ".cache" / "flashinfer" / VERSION / "90a" / "cached_ops" / name
        built.mkdir(parents=True)
        os.link(so, built / f"{name}.so")
    bindir = root / "bin"
    bindir.mkdir()
    (bindir / "nvidia-smi").write_text(f"#!/bin/sh\necho '{H200_SMI}'\n")
    (bindir / "nvidia-smi").chmod(0o755)
    path = [d for d in os.environ["PATH"].split(os.pathsep) if d and not (Path(d) / "nvcc").exists()]
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("JITGUARD_", "FLASHINFER_", "CUDA_", "PYTHONPATH", "LIBRARY_PATH"))
    }
    env.update(
        PATH=os.pathsep.join([str(bindir), *path]),
        PYTHONPATH=os.pathsep.join([str(SRC), str(site), *([str(flashinfer)] if flashinfer else [])]),
        HOME=str(root / "home"),
        JITGUARD_CACHE_DIR=str(root / "jitguard"),
    )
    if shape.toolkit:
        env.update(CUDA_HOME=str(TOOLKIT), FLASHINFER_EXTRA_LDFLAGS=f"-L{stubs}")
        env["PATH"] += os.pathsep + str(TOOLKIT / "bin")
    else:
        (root / "no-toolkit").mkdir()
        env["CUDA_HOME"] = str(root / "no-toolkit")
    return env


def doctor_output(env: dict[str, str], *args: str) -> str:
    proc = subprocess.run(
        [sys.executable, "-m", "jitguard", "doctor", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        cwd="/",
    )
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc.stdout


def doctor(env: dict[str, str], engine: str) -> dict[str, Any]:
    return json.loads(doctor_output(env, "--engine", engine, "--json"))  # type: ignore[no-any-return]


def findings_of(data: dict[str, Any], choice: str) -> dict[str, dict[str, Any]]:
    row = next(c for c in data["engine"]["choices"] if c["choice"] == choice)
    return {f["code"]: f for f in row["findings"]}


def vllm_blocking(data: dict[str, Any]) -> dict[str, set[str]]:
    return {
        c["choice"]: {f["code"] for f in c["findings"] if f["severity"] == "error"}
        for c in data["engine"]["choices"]
    }


def sglang_usable(data: dict[str, Any]) -> dict[str, bool]:
    return {c["phase"]: c["flashinfer_usable"] for c in data["engine"]["choices"]}


Verdicts = tuple[dict[str, Any], dict[str, Any], dict[str, str]]


def run_shape(tmp_path: Path, shape: Shape, so: Path, stub_libcuda_dir: Path) -> Verdicts:
    """doctor's verdicts for vLLM and SGLang in an image of ``shape``, and the image's environment."""
    if shape.toolkit and not (TOOLKIT / "bin" / "nvcc").exists():
        pytest.skip(f"needs the CUDA toolkit at {TOOLKIT}")
    env = image(tmp_path / "image", shape, so, stub_libcuda_dir)
    return doctor(env, "vllm"), doctor(env, "sglang"), env


def test_with_a_toolkit_every_flashinfer_choice_stands(
    tmp_path: Path, module_library: Path, stub_libcuda_dir: Path
) -> None:
    vllm, sglang, _ = run_shape(tmp_path, Shape(toolkit=True), module_library, stub_libcuda_dir)
    assert vllm_blocking(vllm) == {c: set() for c in VLLM_CHOICES}
    assert vllm["backends"]["flashinfer"]["usable"] is True
    assert sglang_usable(sglang) == {"prefill": True, "decode": True, "verify": True}


def test_cubin_without_a_toolkit_keeps_the_cutedsl_paths_and_says_the_cubins_hold_no_module(
    tmp_path: Path, module_library: Path, stub_libcuda_dir: Path
) -> None:
    vllm, sglang, env = run_shape(tmp_path, Shape(cubin=True), module_library, stub_libcuda_dir)
    blocking = vllm_blocking(vllm)
    # Every vLLM choice here is an nvcc module on Hopper; flashinfer-cubin holds none of them.
    assert all("nvcc-missing" in blocking[c] for c in VLLM_CHOICES), blocking
    assert all(blocking[c] <= NO_TOOLKIT for c in VLLM_CHOICES), blocking
    cubin = findings_of(vllm, "flashinfer-ops")["flashinfer-cubin-no-modules"]
    assert cubin["severity"] == "info"
    assert "kernel families batched_gemm, deep-gemm, fmha, gemm" in cubin["evidence"][0]
    assert "fused_moe_trtllm_sm100" in cubin["cause"] and "fmha_gen" in cubin["cause"]
    assert cubin["fixes"][0]["command"].startswith(f"pip install flashinfer-jit-cache=={VERSION} ")
    assert cubin["fixes"][0]["command"].endswith("/cu130")  # torch's CUDA
    report = doctor_output(env, "--engine", "vllm")
    assert "note: [flashinfer-cubin-no-modules] flashinfer-cubin 0.6.6 holds kernel binaries" in report
    # SGLang's GDN decode and verify are CuTeDSL kernels: no toolkit needed, nothing blocks them.
    assert sglang_usable(sglang) == {"prefill": False, "decode": True, "verify": True}
    # doctor's GDN verdict: blocked for the nvcc module only, by the missing toolkit only.
    assert {
        f["code"] for f in vllm["backends"]["flashinfer"]["findings"] if f["severity"] == "error"
    } <= NO_TOOLKIT


def test_a_matching_jit_cache_without_a_toolkit_keeps_every_flashinfer_choice(
    tmp_path: Path, module_library: Path, stub_libcuda_dir: Path
) -> None:
    vllm, sglang, _ = run_shape(tmp_path, Shape(jit_cache=True), module_library, stub_libcuda_dir)
    assert vllm_blocking(vllm) == {c: set() for c in VLLM_CHOICES}
    backend = vllm["backends"]["flashinfer"]
    assert backend["usable"] is True
    assert [f["code"] for f in backend["findings"]] == ["gdn-prebuilt-available"]
    # vLLM's own has_flashinfer() wants nvcc or flashinfer-cubin: doctor says so, with the fix.
    gate = findings_of(vllm, "flashinfer-ops")["vllm-gate-wants-cubin"]
    assert gate["fixes"][0]["command"] == f"pip install flashinfer-cubin=={VERSION}"
    assert sglang_usable(sglang) == {"prefill": True, "decode": True, "verify": True}


def test_without_toolkit_or_prebuilt_modules_only_the_cutedsl_paths_stand(
    tmp_path: Path, module_library: Path, stub_libcuda_dir: Path
) -> None:
    vllm, sglang, _ = run_shape(tmp_path, Shape(), module_library, stub_libcuda_dir)
    blocking = vllm_blocking(vllm)
    assert all("nvcc-missing" in blocking[c] and blocking[c] <= NO_TOOLKIT for c in VLLM_CHOICES), blocking
    codes = {f["code"] for c in vllm["engine"]["choices"] for f in c["findings"]}
    assert "flashinfer-cubin-no-modules" not in codes
    assert sglang_usable(sglang) == {"prefill": False, "decode": True, "verify": True}


def test_one_prebuilt_module_keeps_has_flashinfer_but_not_the_choices_it_does_not_cover(
    tmp_path: Path, module_library: Path, stub_libcuda_dir: Path
) -> None:
    vllm, _, _ = run_shape(tmp_path, Shape(workspace=("norm",)), module_library, stub_libcuda_dir)
    blocking = vllm_blocking(vllm)
    # has_flashinfer() answers for every kernel behind it: False would turn off the norm module that loads.
    assert blocking["flashinfer-ops"] == set()
    row = next(c for c in vllm["engine"]["choices"] if c["choice"] == "flashinfer-ops")
    assert row["prebuilt"] == ["norm"]
    assert all("nvcc-missing" in blocking[c] for c in VLLM_CHOICES if c != "flashinfer-ops"), blocking


def test_cutedsl_era_gdn_prefill_needs_no_toolkit_while_the_nvcc_modules_do(
    tmp_path: Path, module_library: Path, stub_libcuda_dir: Path
) -> None:
    from flashinfer_releases import prepared

    env = image(tmp_path / "image", Shape(), module_library, stub_libcuda_dir, flashinfer=prepared("0.7.4"))
    vllm = doctor(env, "vllm")
    assert vllm["facts"]["flashinfer"]["version"] == "0.7.4"
    blocking = vllm_blocking(vllm)
    assert blocking["gdn-prefill"] == set()
    assert vllm["backends"]["flashinfer"]["usable"] is True
    assert all("nvcc-missing" in blocking[c] for c in VLLM_CHOICES if c != "gdn-prefill"), blocking
