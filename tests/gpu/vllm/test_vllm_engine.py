"""A real vLLM engine on an H200 with jitguard's plugin (marker `gpu`): the decisions happen in vLLM's own
engine-core process, and the engine they leave serves.

Needs vLLM on the GPU host (carried in with ../shared/gpu-e2e: vLLM 0.22-0.26 pin the host's torch 2.11):
    PYTHONPATH=$PWD/src:/tmp/site python -m pytest -m gpu tests/gpu/vllm -v -s
A small Qwen3-Next (random weights: ``load_format="dummy"``, no download, no tokenizer) serves from token ids.

FlashInfer is made to fail for real, and fast: ``FLASHINFER_EXTRA_CUDAFLAGS`` carries a flag nvcc rejects, so
every FlashInfer module build fails on its first nvcc call, as a broken toolchain does, but in seconds instead
of the minutes a real GDN build takes. The first start meets the failure at first use (jitguard's build hook
classifies and records it in the engine's own process); the next start reads that record in the same kind of
process, so nothing depends on this test process computing the engine's fingerprint. (The earlier version
recorded the failure from this process and then waited on engines that built FlashInfer for minutes: a
FlashInfer GDN build when the fingerprints differ, and FlashInfer's sampler, on by default and never
disabled there. Each engine here runs in its own session under a time limit and is killed with its whole
tree afterwards.)
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.slow,
    pytest.mark.skipif(
        importlib.util.find_spec("vllm") is None, reason="needs vLLM installed on the GPU host"
    ),
]

BROKEN_NVCC_FLAG = "--jitguard-test-no-such-nvcc-flag"
ENGINE_TIMEOUT = 600  # the first engine compiles Triton's FLA kernels cold (~150 s on the H200)
START = (
    Path(__file__).resolve().parents[3] / "benchmarks" / "vllm_engine_start.py"
)  # shared with the benchmark


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("qwen3-next-tiny")
    subprocess.run([sys.executable, str(START), "model", str(directory)], check=True)
    return directory


def broken_env(directory: Path, **extra: str) -> dict[str, str]:
    """A fresh jitguard cache and FlashInfer workspace, and FlashInfer builds that fail at their first nvcc."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("JITGUARD_")}
    env.update(
        JITGUARD_CACHE_DIR=str(directory / "jitguard-cache"),
        FLASHINFER_WORKSPACE_BASE=str(directory / "flashinfer"),
        FLASHINFER_EXTRA_CUDAFLAGS=BROKEN_NVCC_FLAG,
        PYTHONUNBUFFERED="1",
        **extra,
    )
    return env


def serve(model: Path, env: dict[str, str], gdn: str = "auto", sampling: str = "greedy") -> tuple[int, str]:
    """One engine start in its own session; (exit status, everything it printed). Its tree is killed after."""
    proc = subprocess.Popen(
        [sys.executable, str(START), "serve", str(model), gdn, sampling],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        text=True,
        start_new_session=True,
    )
    try:
        output, _ = proc.communicate(timeout=ENGINE_TIMEOUT)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        output, _ = proc.communicate()
        pytest.fail(f"the engine did not finish within {ENGINE_TIMEOUT} s:\n{output[-6000:]}")
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)  # what it left behind (compilers, an engine core)
    return proc.returncode, output


def lines(output: str, needle: str) -> list[str]:
    return [line for line in output.splitlines() if needle in line]


def recorded(env: dict[str, str], prefix: str) -> list[str]:
    from jitguard.state.failure_cache import FailureCache

    entries = FailureCache(Path(env["JITGUARD_CACHE_DIR"])).entries()
    return [r.module for r in entries if r.failed and r.module.startswith(prefix)]


@pytest.fixture(scope="module")
def gdn_broken(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    return broken_env(tmp_path_factory.mktemp("gdn-broken"), VLLM_USE_FLASHINFER_SAMPLER="0")


def test_1_a_gdn_build_that_fails_at_first_use_is_classified_and_recorded(
    model_dir: Path, gdn_broken: dict[str, str]
) -> None:
    status, output = serve(model_dir, gdn_broken)
    assert (
        status != 0 and "BENCH GENERATED" not in output
    )  # as without jitguard: the build fails, so does the start
    assert lines(output, "Build of gdn_prefill"), output[-6000:]
    assert recorded(gdn_broken, "gdn_prefill"), output[-6000:]


def test_2_the_next_start_serves_on_triton_at_once(model_dir: Path, gdn_broken: dict[str, str]) -> None:
    status, output = serve(model_dir, gdn_broken)
    assert status == 0, output[-6000:]
    assert "BENCH GENERATED 8" in output
    warned = lines(output, "jitguard: vLLM chose FlashInfer GDN prefill")
    assert len(warned) == 1, output[-6000:]  # TP1: one engine-core process, one warning
    assert "[flashinfer-cached-failure]" in warned[0]
    assert not lines(output, "Build of gdn_prefill")  # nothing was built again


def test_3_asked_for_flashinfer_it_stops_at_init(model_dir: Path, gdn_broken: dict[str, str]) -> None:
    status, output = serve(model_dir, gdn_broken, gdn="flashinfer")
    assert status != 0 and "BENCH GENERATED" not in output
    assert lines(output, "jitguard: FlashInfer GDN prefill was requested (--gdn-prefill-backend flashinfer)")
    assert "[flashinfer-cached-failure]" in output


def test_4_the_engine_judges_on_the_fingerprint_jitguard_doctor_reports(
    model_dir: Path, gdn_broken: dict[str, str]
) -> None:
    _, output = serve(model_dir, gdn_broken)
    logged = set(re.findall(r"\(fingerprint ([0-9a-f]{16})\)", output))
    doctor = subprocess.run(
        [sys.executable, "-m", "jitguard", "doctor", "--json"], env=gdn_broken, capture_output=True, text=True
    )
    reported = json.loads(doctor.stdout)["fingerprint"]
    assert logged == {reported}, f"engine: {sorted(logged)}, jitguard doctor: {reported}"


@pytest.fixture(scope="module")
def sampler_broken(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    return broken_env(
        tmp_path_factory.mktemp("sampler-broken")
    )  # VLLM_USE_FLASHINFER_SAMPLER: vLLM's default


def test_5_stock_vllm_dies_on_a_sampler_build_that_fails(
    model_dir: Path, sampler_broken: dict[str, str]
) -> None:
    status, output = serve(
        model_dir, {**sampler_broken, "JITGUARD_DISABLE": "1"}, gdn="triton", sampling="top"
    )
    assert status != 0 and "BENCH GENERATED" not in output, output[-6000:]


def test_6_with_jitguard_the_sampler_fails_over_to_pytorch_and_the_engine_serves(
    model_dir: Path, sampler_broken: dict[str, str]
) -> None:
    status, output = serve(model_dir, sampler_broken, gdn="triton", sampling="top")
    assert status == 0, output[-6000:]
    assert "BENCH GENERATED 8" in output
    [warned] = lines(output, "jitguard: FlashInfer top-k/top-p sampler failed on first use")
    assert "PyTorch-native sampler" in warned
    assert recorded(sampler_broken, "sampling")


def test_7_the_next_start_takes_the_pytorch_sampler_at_init(
    model_dir: Path, sampler_broken: dict[str, str]
) -> None:
    status, output = serve(model_dir, sampler_broken, gdn="triton", sampling="top")
    assert status == 0, output[-6000:]
    [warned] = lines(output, "jitguard: vLLM chose FlashInfer top-k/top-p sampler, but it cannot work here")
    assert "[flashinfer-cached-failure]" in warned
    assert not lines(output, "failed on first use")
