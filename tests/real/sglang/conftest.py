"""Real SGLang releases for the plugin tests, prepared by .ci/install_sglang.sh (the same script CI runs; cached,
so calling it again costs a moment), and the hosts the tests put them on."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[3]
SCENARIO = Path(__file__).with_name("sglang_scenario.py")
# One release per layout and FlashInfer era: 0.5.15 (process-wide choice, FlashInfer 0.6.12: nvcc JIT) and
# 0.5.23 (per-runner choice, FlashInfer 0.7.2: CuTeDSL).
VERSIONS = os.environ.get("JITGUARD_SGLANG_VERSIONS", "0.5.15 0.5.23").split()
ROOT = Path(os.environ.get("JITGUARD_SGLANG_ROOT", "/tmp/jitguard-ci/sglang"))
# What `nvidia-smi --query-gpu=index,name,compute_cap,driver_version,memory.total,uuid` prints on each host.
GPUS = {
    "H200": "0, NVIDIA H200, 9.0, 580.95.05, 143771, GPU-6a1f0000-0000-0000-0000-000000000000",
    "B200": "0, NVIDIA B200, 10.0, 580.95.05, 183359, GPU-7b2e0000-0000-0000-0000-000000000000",
}
ARCH_LISTS = {"H200": "9.0a", "B200": "10.0a"}  # FLASHINFER_CUDA_ARCH_LIST as FlashInfer derives it there


@dataclass(frozen=True)
class SglangRelease:
    version: str
    python: Path
    src: Path

    @property
    def version_tuple(self) -> tuple[int, ...]:
        return tuple(int(p) for p in self.version.split(".")[:3])

    def run(
        self, spec: Mapping[str, Any], env: Mapping[str, str], *, script: Path = SCENARIO
    ) -> tuple[dict[str, Any], str]:
        """Run ``script`` (default sglang_scenario.py) in this release's environment; (its RESULT, everything
        it printed)."""
        # This checkout's jitguard first, whatever is installed.
        full = {**env, "PYTHONPATH": f"{REPO / 'src'}:{self.src}", "HF_HUB_OFFLINE": "1"}
        proc = subprocess.run(
            [str(self.python), str(script), json.dumps(spec)],
            env=full,
            capture_output=True,
            text=True,
            timeout=300,
            stdin=subprocess.DEVNULL,
        )
        output = proc.stdout + proc.stderr
        results = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
        assert proc.returncode == 0 and results, (
            f"scenario failed (exit {proc.returncode}):\n{output[-6000:]}"
        )
        return json.loads(results[-1][len("RESULT ") :]), output


def prepare(versions: Sequence[str]) -> dict[str, SglangRelease]:
    """Run .ci/install_sglang.sh for ``versions``; skips (fails under CI) with its last line when it cannot."""
    env = {**os.environ, "JITGUARD_SGLANG_VERSIONS": " ".join(versions), "JITGUARD_SGLANG_ROOT": str(ROOT)}
    proc = subprocess.run(
        ["bash", str(REPO / ".ci" / "install_sglang.sh")],
        env={**env, "PYTHON": sys.executable},
        capture_output=True,
        text=True,
        timeout=1800,
        stdin=subprocess.DEVNULL,
    )
    if proc.returncode != 0:
        tail = (proc.stdout + proc.stderr).strip().splitlines()[-1:] or ["no output"]
        message = f".ci/install_sglang.sh could not prepare SGLang {' '.join(versions)}: {tail[0]}"
        if os.environ.get("CI"):
            pytest.fail(message + "\n" + (proc.stdout + proc.stderr)[-3000:])
        pytest.skip(message)
    return {v: SglangRelease(v, ROOT / v / "venv" / "bin" / "python", ROOT / v / "src") for v in versions}


@pytest.fixture(scope="session")
def prepared_releases() -> dict[str, SglangRelease]:
    return prepare(VERSIONS)


@pytest.fixture(scope="session")
def prepare_release() -> Callable[[str], SglangRelease]:
    """One release outside VERSIONS, for a test about that release's own layout."""
    return lambda version: prepare([version])[version]


@pytest.fixture(scope="module", params=VERSIONS)
def release(request: pytest.FixtureRequest, prepared_releases: dict[str, SglangRelease]) -> SglangRelease:
    return prepared_releases[request.param]


class Hosts:
    """Environments for one engine start each, every one with a fresh jitguard cache."""

    def __init__(self, base: Path) -> None:
        self._base = base
        self._count = 0

    def machine(self, **extra: str) -> dict[str, str]:
        """This machine as it is: no GPU, no libcuda, the CPU torch."""
        self._count += 1
        directory = self._base / f"host-{self._count}"
        directory.mkdir()
        env = {k: v for k, v in os.environ.items() if not k.startswith(("JITGUARD_", "SGLANG_"))}
        env["JITGUARD_CACHE_DIR"] = str(directory / "jitguard-cache")
        env["FLASHINFER_CUDA_ARCH_LIST"] = "9.0a"
        env["FLASHINFER_WORKSPACE_BASE"] = str(directory / "flashinfer-workspace")
        env.update(extra)
        return env

    def gpu(self, name: str, *, libcuda: bool) -> dict[str, str]:
        """This machine dressed as a ``name`` host for jitguard's probes: an ``nvidia-smi`` that answers as its
        driver does (a real executable; NVML is absent here, so jitguard asks it), and real ``libcudart.so``
        and, when ``libcuda``, ``libcuda.so`` on LIBRARY_PATH, found by jitguard's real trial link."""
        if shutil.which("gcc") is None:
            pytest.skip("gcc is needed to build the stand-in CUDA libraries")
        env = self.machine()
        directory = Path(env["JITGUARD_CACHE_DIR"]).parent
        (directory / "bin").mkdir()
        (directory / "lib").mkdir()
        smi = directory / "bin" / "nvidia-smi"
        smi.write_text(f"#!/bin/sh\necho '{GPUS[name]}'\n")
        smi.chmod(0o755)
        for library in ("cudart", "cuda") if libcuda else ("cudart",):
            source = directory / "lib" / f"{library}.c"
            source.write_text(f"int jitguard_test_{library}(void) {{ return 0; }}\n")
            target = directory / "lib" / f"lib{library}.so"
            subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(target), str(source)], check=True)
        env["FLASHINFER_CUDA_ARCH_LIST"] = ARCH_LISTS[name]
        env["PATH"] = f"{directory / 'bin'}{os.pathsep}{env.get('PATH', '')}"
        env["LIBRARY_PATH"] = os.pathsep.join(
            p for p in (str(directory / "lib"), env.get("LIBRARY_PATH")) if p
        )
        return env


@pytest.fixture(scope="session")
def hosts(tmp_path_factory: pytest.TempPathFactory) -> Hosts:
    return Hosts(tmp_path_factory.mktemp("sglang-hosts"))
