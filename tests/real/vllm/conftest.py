"""Real vLLM releases for the plugin tests, prepared by .ci/install_vllm.sh (the same script CI runs; cached,
so calling it again costs a moment), and the machine situations the tests put them in.

Each release is prepared on first use, on its own: its progress lines show in the terminal while it prepares
(minutes the first time), and one that cannot be prepared skips (fails, under CI=true) only its own tests,
with one line saying why; the full pip output stays in ``<root>/<version>.log``."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[3]
SCENARIO = Path(__file__).with_name("scenario.py")
# 0.21.0 is the last spring-2026 GDN layout, 0.24.0 the release the H200 host runs (its sampler decides in
# flashinfer_sampler_supported(), from 0.23), 0.33.0 the newest.
VERSIONS = os.environ.get("JITGUARD_VLLM_VERSIONS", "0.21.0 0.24.0 0.33.0").split()
ROOT = Path(os.environ.get("JITGUARD_VLLM_ROOT", "/tmp/jitguard-ci/vllm"))
# Seconds for one release: the first preparation takes 1-1.5 minutes, up to 5 on a busy machine or a slow network.
# The test whose setup prepares it gets this much more than pytest-timeout's 600 s (which counts fixture setup).
PREPARE_TIMEOUT = 1200
H200_SMI = "0, NVIDIA H200, 9.0, 580.95.05, 143771, GPU-6a1f0000-0000-0000-0000-000000000000"


@dataclass(frozen=True)
class VllmRelease:
    """One release's sources and dependencies, layered on this interpreter (its torch, its jitguard)."""

    version: str
    pythonpath: str

    def run(
        self, spec: Mapping[str, Any], env: Mapping[str, str], *, script: Path = SCENARIO
    ) -> tuple[dict[str, Any], str]:
        """Run ``script`` (default scenario.py) in this release's environment; (its RESULT, everything it
        printed)."""
        full = dict(env)
        full["PYTHONPATH"] = (
            f"{REPO / 'src'}:{self.pythonpath}"  # this checkout's jitguard, whatever is installed
        )
        full.setdefault("HF_HUB_OFFLINE", "1")
        full.setdefault("VLLM_LOGGING_LEVEL", "INFO")
        proc = subprocess.run(
            [sys.executable, str(script), json.dumps(spec)],
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


def _terminal(config: pytest.Config) -> Callable[[str], None]:
    """Write a line to the terminal now, past pytest's output capture (no ``-s`` needed)."""
    capture = config.pluginmanager.getplugin("capturemanager")
    reporter = config.pluginmanager.getplugin("terminalreporter")

    def say(line: str) -> None:
        if capture is None or reporter is None:
            print(line, file=sys.stderr, flush=True)
            return
        with capture.global_and_fixture_disabled():
            reporter.write_line(line)

    return say


def prepare(version: str, say: Callable[[str], None]) -> VllmRelease | str:
    """Run .ci/install_vllm.sh for ``version``, passing its lines to ``say`` as they come; the release, or one
    line saying why it could not be prepared."""
    proc = subprocess.Popen(
        ["bash", str(REPO / ".ci" / "install_vllm.sh")],
        env={
            **os.environ,
            "JITGUARD_VLLM_VERSIONS": version,
            "JITGUARD_VLLM_ROOT": str(ROOT),
            "PYTHON": sys.executable,
        },
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        text=True,
        start_new_session=True,  # its own process group: a timeout stops pip too, not only the script
    )
    watchdog = threading.Timer(PREPARE_TIMEOUT, os.killpg, (proc.pid, signal.SIGKILL))
    watchdog.start()
    lines = []
    try:
        assert proc.stdout is not None
        for raw in proc.stdout:
            lines.append(raw.rstrip())
            say(lines[-1])
        status = proc.wait()
    except BaseException:  # Ctrl-C or pytest-timeout: no pip left running
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        raise
    finally:
        watchdog.cancel()
    ready = [m for line in lines if (m := re.search(r"\bready: PYTHONPATH=(\S+)$", line))]
    if status == 0 and ready:
        return VllmRelease(version, ready[-1].group(1))
    if status == -signal.SIGKILL:
        why = f"timed out after {PREPARE_TIMEOUT} s"
    else:
        why = f"exit {status}" if status else "exit 0 but no 'ready: PYTHONPATH=...' line"
    log = ROOT / f"{version}.log"
    return (
        f"vLLM {version} could not be prepared (.ci/install_vllm.sh {why}){_last_error(log)}; full log: {log}"
    )


def _last_error(log: Path) -> str:
    """': <pip's last 'ERROR:' line>' (or the log's last line), cut to fit in one line; '' without a log."""
    try:
        lines = [line.strip() for line in log.read_text(errors="replace").splitlines() if line.strip()]
    except OSError:
        return ""
    errors = [line for line in lines if line.startswith("ERROR:")]
    last = (errors or lines or [""])[-1]
    return f": {last[:200]}" if last else ""


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Room for a first preparation in the setup of whichever test needs a release first."""
    if not config.pluginmanager.hasplugin("timeout"):
        return
    for item in items:
        if "release" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.timeout(PREPARE_TIMEOUT + 600))


@pytest.fixture(scope="session")
def releases(pytestconfig: pytest.Config) -> Callable[[str], VllmRelease | str]:
    """``version -> release`` (or why not), each prepared once per session, on first use."""
    say = _terminal(pytestconfig)
    done: dict[str, VllmRelease | str] = {}

    def get(version: str) -> VllmRelease | str:
        if version not in done:
            done[version] = prepare(version, say)
        return done[version]

    return get


@pytest.fixture(scope="module", params=VERSIONS)
def release(request: pytest.FixtureRequest, releases: Callable[[str], VllmRelease | str]) -> VllmRelease:
    prepared = releases(request.param)
    if isinstance(prepared, str):
        if os.environ.get("CI"):
            pytest.fail(prepared, pytrace=False)
        pytest.skip(prepared)
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


@pytest.fixture(scope="session")
def situations(tmp_path_factory: pytest.TempPathFactory) -> Situations:
    return Situations(tmp_path_factory.mktemp("vllm-situations"))
