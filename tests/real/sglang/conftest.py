"""Real SGLang releases for the plugin tests, each with the FlashInfer it pins, prepared by .ci/install_sglang.sh
(the same script CI runs; cached, so calling it again costs a moment; all releases at once, in parallel, when a
test first needs one: tests/lib/release_preparation.py), and the hosts the tests put them on."""

from __future__ import annotations

import importlib.metadata
import os
import shutil
import subprocess
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from packaging.version import Version

from dsl_copies import dsl_target, python_without_dsl
from release_preparation import (
    CI_ROOT,
    NotPrepared,
    Preparation,
    skip_or_fail,
    start_when_selected,
    terminal,
)
from scenario_runner import run_scenario

REPO = Path(__file__).resolve().parents[3]
SCENARIO = Path(__file__).with_name("sglang_scenario.py")
# 0.5.15 (process-wide choice, FlashInfer 0.6.12: nvcc JIT) and 0.5.23 (per-runner choice, FlashInfer 0.7.2:
# CuTeDSL). 0.5.16 (process-wide choice, FlashInfer 0.6.14: CuTeDSL) prepares, but its ServerArgs imports
# modules (compressed_tensors schemes) whose dependencies .ci/sglang_wheel.py does not list yet.
VERSIONS = os.environ.get("JITGUARD_SGLANG_VERSIONS", "0.5.15 0.5.23").split()
PREPARE_TIMEOUT = 1800  # seconds for every release, in parallel (see tests/real/vllm/conftest.py)
CUTEDSL_FROM = (
    "0.6.14"  # FlashInfer's SM90 GDN prefill moved from an nvcc JIT module to CuTeDSL (its PR #3477)
)
ROOT = Path(os.environ.get("JITGUARD_SGLANG_ROOT") or CI_ROOT / "sglang")
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
    extra: tuple[Path, ...] = ()  # on PYTHONPATH after the sources (a DSL installed with --target)

    @property
    def version_tuple(self) -> tuple[int, ...]:
        return tuple(int(p) for p in self.version.split(".")[:3])

    @property
    def flashinfer(self) -> str:
        """The flashinfer-python version this release's venv sees first (the one it pins)."""
        for site in sorted(self.python.parent.parent.glob("lib/python*/site-packages")):
            for dist in importlib.metadata.distributions(path=[str(site)]):
                if (dist.metadata["Name"] or "").lower().replace("_", "-") == "flashinfer-python":
                    return dist.version
        raise AssertionError(f"no flashinfer-python in the venv of {self.python}")

    @property
    def era(self) -> str:
        """FlashInfer's GDN prefill era on SM90: 'nvcc' (up to 0.6.13) or 'cutedsl' (from 0.6.14)."""
        return "cutedsl" if Version(self.flashinfer) >= Version(CUTEDSL_FROM) else "nvcc"

    def without_dsl_path(self, directory: Path) -> SglangRelease:
        """This release as a ``pip install --target`` deployment leaves it: a venv of its packages without the
        DSL, and the DSL (its own files, linked) in a directory on PYTHONPATH, where its .pth is never read."""
        python = python_without_dsl(directory / "venv", self.python)
        return SglangRelease(self.version, python, self.src, (dsl_target(directory / "dsl", self.python),))

    def run(
        self, spec: Mapping[str, Any], env: Mapping[str, str], *, script: Path = SCENARIO
    ) -> tuple[dict[str, Any], str]:
        """Run ``script`` (default sglang_scenario.py) in this release's environment; (its RESULT, everything
        it printed)."""
        # This checkout's jitguard first, whatever is installed.
        path = os.pathsep.join(map(str, (REPO / "src", self.src, *self.extra)))
        full = {**env, "PYTHONPATH": path, "HF_HUB_OFFLINE": "1"}
        return run_scenario(self.python, script, spec, full)


PREPARATION = pytest.StashKey[Preparation]()


def start(versions: list[str] = VERSIONS) -> Preparation:
    env = {"JITGUARD_SGLANG_VERSIONS": " ".join(versions), "JITGUARD_SGLANG_ROOT": str(ROOT)}
    return Preparation("sglang", versions, ROOT, env, timeout=PREPARE_TIMEOUT)


def pytest_collection_finish(session: pytest.Session) -> None:
    """Start preparing every release as soon as a test that needs one is selected (it overlaps with the tests
    that run first)."""
    start_when_selected(session, Path(__file__).parent, PREPARATION, start)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Room for the preparation in the setup of whichever test waits for a release first."""
    if not config.pluginmanager.hasplugin("timeout"):
        return
    for item in items:
        if "release" in getattr(item, "fixturenames", ()) and Path(item.path).is_relative_to(
            Path(__file__).parent
        ):
            item.add_marker(pytest.mark.timeout(PREPARE_TIMEOUT + 600))


def pytest_sessionfinish(session: pytest.Session) -> None:
    """No preparation outlives the session (an interrupted one resumes next time: the script's steps are
    staged and stamped)."""
    preparation = session.config.stash.get(PREPARATION, None)
    if preparation is not None:
        preparation.stop()


@pytest.fixture(scope="session")
def releases(pytestconfig: pytest.Config) -> Iterator[Callable[[str], SglangRelease]]:
    """``version -> release``: every release of the session prepared by one run of the script, started when a
    test first needs one (a release outside VERSIONS, for a test about its own layout, by a run of its own);
    a release that cannot be prepared skips (fails, under CI=true) its own tests."""
    say = terminal(pytestconfig)
    started: dict[str, Preparation] = {}

    def get(version: str) -> SglangRelease:
        key = "session" if version in VERSIONS else version
        if key not in started:
            session = pytestconfig.stash.get(PREPARATION, None) if key == "session" else None
            started[key] = session or start(VERSIONS if key == "session" else [version])
        try:
            directory = Path(started[key].get(version, say))
        except NotPrepared as exc:
            skip_or_fail(str(exc))
        return SglangRelease(version, directory / "venv" / "bin" / "python", directory / "src")

    yield get
    for preparation in started.values():
        preparation.stop()


@pytest.fixture(scope="module", params=VERSIONS)
def release(request: pytest.FixtureRequest, releases: Callable[[str], SglangRelease]) -> SglangRelease:
    return releases(request.param)


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
