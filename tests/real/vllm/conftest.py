"""Real vLLM releases for the plugin tests, each with the FlashInfer it pins, prepared by .ci/install_vllm.sh (the
same script CI runs; cached, so calling it again costs a moment), and the machine situations the tests put
them in.

The first test that needs a release starts the preparation of all of them (in parallel, minutes the first
time; tests/lib/release_preparation.py): the progress lines show in the terminal while a test waits, and a release
that cannot be prepared skips (fails, under CI=true) only its own tests, with one line saying why; the full
pip output stays in ``<root>/<version>.log``."""

from __future__ import annotations

import importlib.metadata
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from packaging.version import Version

from dsl_copies import copy_dsl, installed_dsl, python_without_dsl
from release_preparation import (
    VLLM_ROOT,
    NotPrepared,
    Preparation,
    skip_or_fail,
    start_when_selected,
    terminal,
)
from scenario_runner import run_scenario

REPO = Path(__file__).resolve().parents[3]
SCENARIO = Path(__file__).with_name("scenario.py")
# Each with the FlashInfer it pins. 0.21.0: the last spring-2026 GDN layout (FlashInfer 0.6.8.post1, nvcc-built
# GDN prefill); 0.24.0: the release the H200 host runs, its sampler decides in flashinfer_sampler_supported()
# (0.6.12, nvcc); 0.26.0: the first of the CuTeDSL era (0.6.14 + DSL 4.6.0); 0.30.0: 0.6.18.post1 + DSL 4.7.1,
# torch 2.13; 0.33.0: the newest jitguard knows (0.7.2.post1 + DSL 4.8.0).
VERSIONS = os.environ.get("JITGUARD_VLLM_VERSIONS", "0.21.0 0.24.0 0.26.0 0.30.0 0.33.0").split()
ROOT = VLLM_ROOT
# Seconds for the preparation of every release (in parallel): the first takes a few minutes, more on a busy
# machine or a slow network. The test whose setup waits for it gets this much more than pytest-timeout's 600 s
# (which counts fixture setup).
PREPARE_TIMEOUT = 1800
CUTEDSL_FROM = (
    "0.6.14"  # FlashInfer's SM90 GDN prefill moved from an nvcc JIT module to CuTeDSL (its PR #3477)
)
DSL_PACKAGE_DIRS = ("dsl_packages", "python_packages")  # nvidia_cutlass_dsl/<this>: 4.6+, 4.4 and 4.5
H200_SMI = "0, NVIDIA H200, 9.0, 580.95.05, 143771, GPU-6a1f0000-0000-0000-0000-000000000000"


@dataclass(frozen=True)
class VllmRelease:
    """One release's sources and dependencies (the FlashInfer and nvidia-cutlass-dsl it pins among them),
    layered on this interpreter (its torch, its jitguard)."""

    version: str
    pythonpath: str

    @property
    def minor(self) -> int:
        return int(self.version.split(".")[1])

    @property
    def flashinfer(self) -> str:
        """The flashinfer-python version this release's environment sees (the one it pins)."""
        for dist in importlib.metadata.distributions(path=self.pythonpath.split(os.pathsep)):
            if (dist.metadata["Name"] or "").lower().replace("_", "-") == "flashinfer-python":
                return dist.version
        raise AssertionError(f"no flashinfer-python on {self.pythonpath}")

    @property
    def era(self) -> str:
        """FlashInfer's GDN prefill era on SM90: 'nvcc' (a JIT module compiled and linked, up to 0.6.13) or
        'cutedsl' (compiled in-process by nvidia-cutlass-dsl, from 0.6.14)."""
        return "cutedsl" if Version(self.flashinfer) >= Version(CUTEDSL_FROM) else "nvcc"

    def first(self, *entries: Path) -> VllmRelease:
        """This release with ``entries`` before its own on the path (e.g. a damaged copy of its DSL)."""
        return VllmRelease(self.version, os.pathsep.join([*map(str, entries), self.pythonpath]))

    def with_damaged_dsl(self, directory: Path) -> VllmRelease:
        """This release with one file of its nvidia-cutlass-dsl no longer its wheel's (as an interrupted,
        mixed or parallel install leaves it): a copy in ``directory`` whose other files link to the release's,
        first on the path, so the release's own files (and the pool behind them) stay intact."""
        path = self.pythonpath.split(os.pathsep)
        # The package 'cutlass' comes with -libs-core from DSL 4.6, with -libs-base before.
        owners = {(d.metadata["Name"] or "").lower(): d for d in installed_dsl(path)}
        [changed] = [
            str(f)
            for name in ("nvidia-cutlass-dsl-libs-core", "nvidia-cutlass-dsl-libs-base")
            if name in owners
            for f in owners[name].files or ()
            if str(f).endswith("cutlass/__init__.py")
        ][:1]
        site = copy_dsl(directory, copied=[changed], path=path)
        (site / changed).write_bytes((site / changed).read_bytes() + b"\n# not the wheel's copy\n")
        packages = [site / "nvidia_cutlass_dsl" / sub for sub in ("dsl_packages", "python_packages")]
        return self.first(site, *(p for p in packages if p.is_dir()))

    @property
    def dsl_packages(self) -> list[str]:
        """The entries of this release's path that hold the DSL's own packages ('cutlass'), where its .pth file
        would put them in a site directory."""
        return [p for p in self.pythonpath.split(os.pathsep) if Path(p).name in DSL_PACKAGE_DIRS]

    def without_dsl_path(self) -> VllmRelease:
        """This release as a ``pip install --target`` deployment leaves it: the DSL installed, its packages
        directory not on the path (PYTHONPATH entries read no .pth file)."""
        kept = [p for p in self.pythonpath.split(os.pathsep) if p not in self.dsl_packages]
        return VllmRelease(self.version, os.pathsep.join(kept))

    def environment(self, env: Mapping[str, str]) -> dict[str, str]:
        """``env`` with this release on PYTHONPATH, behind this checkout's jitguard (whatever is installed)."""
        return {**env, "PYTHONPATH": f"{REPO / 'src'}{os.pathsep}{self.pythonpath}"}

    def run(
        self,
        spec: Mapping[str, Any],
        env: Mapping[str, str],
        *,
        script: Path = SCENARIO,
        python: Path | str = sys.executable,
    ) -> tuple[dict[str, Any], str]:
        """Run ``script`` (default scenario.py) in this release's environment with ``python``; (its RESULT,
        everything it printed)."""
        full = self.environment(env)
        full.setdefault("HF_HUB_OFFLINE", "1")
        full.setdefault("VLLM_LOGGING_LEVEL", "INFO")
        result, output = run_scenario(python, script, spec, full)
        if "flashinfer" in result:  # the pair under test is the one this environment imports
            assert result["flashinfer"] == self.flashinfer, (result["flashinfer"], self.flashinfer)
        return result, output


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Room for a first preparation in the setup of whichever test needs a release first."""
    if not config.pluginmanager.hasplugin("timeout"):
        return
    for item in items:
        if "release" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.timeout(PREPARE_TIMEOUT + 600))


PREPARATION = pytest.StashKey[Preparation]()


def start() -> Preparation:
    env = {"JITGUARD_VLLM_VERSIONS": " ".join(VERSIONS), "JITGUARD_VLLM_ROOT": str(ROOT)}
    return Preparation("vllm", VERSIONS, ROOT, env, timeout=PREPARE_TIMEOUT)


def pytest_collection_finish(session: pytest.Session) -> None:
    """Start preparing every release as soon as a test that needs one is selected (it overlaps with the tests
    that run first)."""
    start_when_selected(session, Path(__file__).parent, PREPARATION, start)


def pytest_sessionfinish(session: pytest.Session) -> None:
    """No preparation outlives the session (an interrupted one resumes next time: the script's steps are
    staged and stamped)."""
    preparation = session.config.stash.get(PREPARATION, None)
    if preparation is not None:
        preparation.stop()


@pytest.fixture(scope="session")
def releases(pytestconfig: pytest.Config) -> Iterator[Callable[[str], VllmRelease | str]]:
    """``version -> release`` (or one line saying why not): every release of the session prepared by one run
    of the script, started when a test first needs one."""
    say = terminal(pytestconfig)
    started: list[Preparation] = []

    def get(version: str) -> VllmRelease | str:
        if not started:
            started.append(pytestconfig.stash.get(PREPARATION, None) or start())
        try:
            return VllmRelease(version, started[0].get(version, say).removeprefix("PYTHONPATH="))
        except NotPrepared as exc:
            return str(exc)

    yield get
    if started:
        started[0].stop()


@pytest.fixture(scope="module", params=VERSIONS)
def release(request: pytest.FixtureRequest, releases: Callable[[str], VllmRelease | str]) -> VllmRelease:
    prepared = releases(request.param)
    if isinstance(prepared, str):
        skip_or_fail(prepared)
    assert isinstance(prepared, VllmRelease)
    return prepared


def _shared_library(directory: Path, name: str) -> None:
    """A real shared library the linker accepts for ``-l<name>`` (its contents do not matter to a link)."""
    source = directory / f"{name}.c"
    source.write_text(f"int jitguard_test_{name}(void) {{ return 0; }}\n")
    subprocess.run(
        ["gcc", "-shared", "-fPIC", "-o", str(directory / f"lib{name}.so"), str(source)],
        check=True,
        capture_output=True,
    )


@dataclass(frozen=True)
class Doom:
    """A host where FlashInfer's GDN prefill cannot work in the release's era, and the finding that says why."""

    release: VllmRelease
    env: dict[str, str]
    code: str


class Situations:
    """Environments for one engine start each, every one with a fresh jitguard cache."""

    def __init__(self, base: Path) -> None:
        self._base = base
        self._count = 0

    def _dir(self) -> Path:
        self._count += 1
        directory = self._base / f"situation-{self._count}"
        directory.mkdir()
        return directory

    def machine(self, **extra: str) -> dict[str, str]:
        """This machine as it is: no GPU, no libcuda."""
        directory = self._dir()
        env = {k: v for k, v in os.environ.items() if not k.startswith(("JITGUARD_", "VLLM_"))}
        env["JITGUARD_CACHE_DIR"] = str(directory / "jitguard-cache")
        env["FLASHINFER_CUDA_ARCH_LIST"] = "9.0a"
        env["FLASHINFER_WORKSPACE_BASE"] = str(directory / "flashinfer-workspace")
        env.update(extra)
        return env

    def hopper(self, *, libcuda: bool) -> dict[str, str]:
        """This machine dressed as an H200 host: an ``nvidia-smi`` that answers like an H200's driver (a real
        executable; NVML is absent here, so jitguard's GPU probe asks it), and real ``libcudart.so`` and, when
        ``libcuda``, ``libcuda.so`` on LIBRARY_PATH, so jitguard's trial link finds them for real."""
        if shutil.which("gcc") is None:
            pytest.skip("gcc is needed to build the stand-in CUDA libraries")
        env = self.machine()
        directory = Path(env["JITGUARD_CACHE_DIR"]).parent
        bin_dir = directory / "driver-bin"
        lib_dir = directory / "cuda-lib"
        bin_dir.mkdir()
        lib_dir.mkdir()
        smi = bin_dir / "nvidia-smi"
        smi.write_text(f"#!/bin/sh\necho '{H200_SMI}'\n")
        smi.chmod(0o755)
        _shared_library(lib_dir, "cudart")
        if libcuda:
            _shared_library(lib_dir, "cuda")
        env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
        env["LIBRARY_PATH"] = os.pathsep.join(p for p in (str(lib_dir), env.get("LIBRARY_PATH", "")) if p)
        return env

    def doom(self, release: VllmRelease) -> Doom:
        """nvcc era: an H200 host without libcuda (the module links -lcuda). CuTeDSL era, where nothing is
        linked: an H200 host with libcuda, and the release's nvidia-cutlass-dsl damaged on disk."""
        if release.era == "nvcc":
            return Doom(release, self.hopper(libcuda=False), "link-missing-libcuda")
        env = self.hopper(libcuda=True)
        damaged = release.with_damaged_dsl(Path(env["JITGUARD_CACHE_DIR"]).parent / "damaged-dsl")
        return Doom(damaged, env, "cutlass-dsl-install-damaged")


@pytest.fixture(scope="session")
def situations(tmp_path_factory: pytest.TempPathFactory) -> Situations:
    return Situations(tmp_path_factory.mktemp("vllm-situations"))


@pytest.fixture(scope="session")
def python_without_the_dsl(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real venv's python with this interpreter's packages but no nvidia-cutlass-dsl of its own (whose .pth
    would otherwise put the release's DSL packages on the path after all): the release's DSL is then exactly
    what its path holds, as on a user's ``pip install --target`` deployment."""
    return python_without_dsl(tmp_path_factory.mktemp("venv-without-dsl") / "venv")
