"""A real vLLM engine on an H200 with jitguard's plugin (marker `gpu`): the decisions happen in vLLM's own
engine-core process, and the engine they leave serves.

Needs vLLM on the GPU host (a payload of vLLM 0.24.0 and what it needs, built outside this repository: vLLM
0.22-0.26 pin the host's torch 2.11; unpacked into /tmp/site with benchmarks/payload_unpack.py), then one device call (~6 minutes; 10 at most):
    JITGUARD_ENGINE_LOGS=$OUT/logs PYTHONPATH=$PWD/src:/tmp/site \
        python3 -m pytest -m gpu tests/gpu/vllm -v -s -p no:cacheprovider > $OUT/gpu_vllm_test.txt 2>&1
(no outer ``timeout`` shorter than the module's budget below: pytest's failure report comes at the end;
``JITGUARD_ENGINE_LOGS``: a directory for each engine's whole output, kept whatever the outcome).
A small Qwen3-Next (random weights: ``load_format="dummy"``, no download, no tokenizer) serves from token ids.

FlashInfer is made to fail for real, and fast: ``FLASHINFER_EXTRA_CUDAFLAGS`` carries a flag nvcc rejects, so
every FlashInfer module build fails on its first nvcc call, as a broken toolchain does, but in seconds instead
of the minutes a real GDN build takes.

1. Outside the engine: ``jitguard build flashinfer-gdn --model`` (the prebuild a user runs where the engine
   will run) fails for real and records it; the engine started next sees that record in its engine-core
   process and serves on Triton/FLA without building. This is what never passed before: the engine core's
   fingerprint was not the one the rest of jitguard computes (opencv's ``cv2``, imported by ``from vllm
   import LLM``, rewrites LD_LIBRARY_PATH in every vLLM process), so it missed the record and started the
   full 66-file FlashInfer GDN build (480 s and counting on the H200).
2. Inside the engine: a GDN build that fails at first use is classified and recorded by jitguard's build hook
   in the engine's own process; the next start takes Triton/FLA at init, or stops at init when FlashInfer
   was asked for by name.
3. The sampler: stock vLLM dies on a sampler build that fails; with jitguard it fails over to PyTorch's
   sampler at first use, and the next start takes that sampler at init.

Every engine (and the prebuild) runs in a session of its own under ``JITGUARD_ENGINE_LIMIT`` seconds (default
300; the first engine that serves compiles Triton's FLA kernels cold, ~150 s), and at most what is left of the
module's ``JITGUARD_ENGINE_BUDGET`` (default 560 s, inside one device call), and every process it left is
killed by id afterwards (``benchmarks/engine_session.py``); one that runs past its limit fails its test with
the stage it hung in, the build's last line and its last log lines.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from benchmark_modules import BENCHMARKS, load

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.slow,
    pytest.mark.skipif(
        importlib.util.find_spec("vllm") is None, reason="needs vLLM installed on the GPU host"
    ),
]

BROKEN_NVCC_FLAG = "--jitguard-test-no-such-nvcc-flag"
LIMIT_S = float(os.environ.get("JITGUARD_ENGINE_LIMIT", "300"))
# The whole module's seconds (a device call runs 600 s at most): an engine gets what is left, at most LIMIT_S.
BUDGET_S = float(os.environ.get("JITGUARD_ENGINE_BUDGET", "560"))
STARTED = time.monotonic()
# The fingerprint's inputs as a process sees them after ``imports`` (for a mismatch's report).
INPUTS = (
    "import json, sys\n"
    "exec(sys.argv[1])\n"
    "from jitguard.facts import collect, fingerprint\n"
    "f = collect()\n"
    "parts = {k: getattr(f, k) for k in ('gpu', 'toolchain', 'link', 'libstdcxx', 'packages', 'environment')}\n"
    "print(json.dumps(fingerprint.describe(**parts, unavailable=f.unavailable), sort_keys=True))\n"
)
START = BENCHMARKS / "vllm_engine_start.py"  # one engine start, shared with the benchmark


session = load("engine_session")  # benchmarks/engine_session.py


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("qwen3-next-tiny")
    subprocess.run([sys.executable, str(START), "model", str(directory)], check=True, timeout=120)
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


def limit() -> float:
    """LIMIT_S, or what the module's budget has left; a test with under a minute left is skipped, saying so
    (better than the device killing the whole run without a word)."""
    left = BUDGET_S - (time.monotonic() - STARTED)
    if left < 60:
        pytest.skip(f"the module's budget ({BUDGET_S:g} s, JITGUARD_ENGINE_BUDGET) is spent")
    return min(LIMIT_S, left)


def keep(done: Any, what: str) -> None:
    """The whole output of one run, into ``JITGUARD_ENGINE_LOGS`` when set (read it after a failure)."""
    logs = os.environ.get("JITGUARD_ENGINE_LOGS")
    if logs:
        Path(logs).mkdir(parents=True, exist_ok=True)
        name = re.sub(r"[^A-Za-z0-9]+", "-", what).strip("-")
        (Path(logs) / f"{len(list(Path(logs).iterdir())):02d}-{name}.log").write_text(done.tail(4000) + "\n")


def serve(model: Path, env: dict[str, str], what: str, gdn: str = "auto", sampling: str = "greedy") -> Any:
    """One engine start (``session.EngineRun``), bounded; past its limit the test fails saying where it hung."""
    argv = [sys.executable, str(START), "serve", str(model), gdn, sampling]
    done = session.run(argv, env, limit_s=limit())
    keep(done, what)
    if done.timed_out:
        pytest.fail(f"{what}: {done.hang()}", pytrace=False)
    return done


def report(done: Any) -> str:
    return f"{done.summary()}\n{done.tail(60)}"


def said(done: Any, needle: str) -> list[str]:
    return [line for _, line in done.lines if needle in line]


def fingerprints(done: Any) -> set[str]:
    """The fingerprints jitguard logged in the engine's processes (one line per process)."""
    return {fp for _, line in done.lines for fp in re.findall(r"\(fingerprint ([0-9a-f]{16})\)", line)}


def recorded(env: dict[str, str], prefix: str) -> dict[str, str]:
    """module -> fingerprint of each recorded failure of a FlashInfer module named ``prefix*``."""
    from jitguard.state.failure_cache import FailureCache

    entries = FailureCache(Path(env["JITGUARD_CACHE_DIR"])).entries()
    return {r.module: r.fingerprint for r in entries if r.failed and r.module.startswith(prefix)}


# ---- 1. a failure recorded outside the engine -------------------------------------------------------------
@pytest.fixture(scope="module")
def prebuild(tmp_path_factory: pytest.TempPathFactory, model_dir: Path) -> dict[str, Any]:
    """``jitguard build flashinfer-gdn --model`` fails for real (its first nvcc), then an engine starts."""
    env = broken_env(tmp_path_factory.mktemp("prebuild-broken"), VLLM_USE_FLASHINFER_SAMPLER="0")
    argv = [sys.executable, "-m", "jitguard", "build", "flashinfer-gdn", "--model", str(model_dir)]
    cli = session.run(argv, env, limit_s=limit(), stages=(("jitguard build flashinfer-gdn", None),))
    keep(cli, "the prebuild")
    if cli.timed_out:
        pytest.fail(f"the prebuild: {cli.hang()}", pytrace=False)
    records = recorded(env, "gdn_prefill")
    engine = serve(model_dir, env, "the engine after a failed prebuild") if records else None
    return {"env": env, "cli": cli, "records": records, "engine": engine}


def test_1_a_failure_jitguard_build_recorded_is_seen_by_the_engine_core(prebuild: dict[str, Any]) -> None:
    cli, engine = prebuild["cli"], prebuild["engine"]
    assert cli.status == 1 and prebuild["records"], report(cli)  # a real failure, recorded outside vLLM
    assert engine.status == 0 and engine.generated == 8, report(engine)
    warned = said(engine, "jitguard: vLLM chose FlashInfer GDN prefill")
    assert len(warned) == 1, report(engine)  # TP1: one engine-core process, one warning
    assert "[flashinfer-cached-failure]" in warned[0]
    assert not said(engine, "Build of gdn_prefill"), report(engine)  # nothing was built
    assert fingerprints(engine) == set(prebuild["records"].values()), report(engine)


def test_2_the_engine_judges_on_the_fingerprint_jitguard_doctor_reports(prebuild: dict[str, Any]) -> None:
    doctor = subprocess.run(
        [sys.executable, "-m", "jitguard", "doctor", "--json"],
        env=prebuild["env"],
        capture_output=True,
        text=True,
        timeout=180,
    )
    reported = json.loads(doctor.stdout)["fingerprint"]
    if prebuild["engine"] is None:
        pytest.fail(f"no engine started: the prebuild recorded nothing\n{report(prebuild['cli'])}")
    logged = fingerprints(prebuild["engine"])
    assert logged == {reported}, (
        f"engine: {sorted(logged)}, jitguard doctor: {reported}; what a vLLM front end changes in the inputs: "
        f"{inputs_changed(prebuild['env'])}"
    )


def inputs_changed(env: dict[str, str]) -> list[str]:
    """The fingerprint inputs that differ between a plain process and one that did what an engine's
    processes do first (``from vllm import LLM``, CUDA initialised)."""

    def inputs(imports: str) -> dict[str, Any]:
        argv = [sys.executable, "-c", INPUTS, imports]
        done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=240)
        try:
            described: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
        except (IndexError, ValueError):
            return {"(could not collect)": done.stderr[-500:]}
        return described

    plain = inputs("pass")
    engine = inputs("from vllm import LLM\nimport torch\ntorch.cuda.is_available() and torch.cuda.init()")
    return [
        f"{part}: {plain.get(part)!r} -> {engine.get(part)!r}"
        for part in sorted(set(plain) | set(engine))
        if plain.get(part) != engine.get(part)
    ]


# ---- 2. a GDN build that fails at first use, inside the engine --------------------------------------------
@pytest.fixture(scope="module")
def gdn_broken(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    return broken_env(tmp_path_factory.mktemp("gdn-broken"), VLLM_USE_FLASHINFER_SAMPLER="0")


def test_3_a_gdn_build_that_fails_at_first_use_is_classified_and_recorded(
    model_dir: Path, gdn_broken: dict[str, str]
) -> None:
    done = serve(model_dir, gdn_broken, "the first start (GDN build fails at first use)")
    # as without jitguard: the build fails, so does the start
    assert done.status != 0 and done.generated is None, report(done)
    assert said(done, "Build of gdn_prefill"), report(done)
    assert recorded(gdn_broken, "gdn_prefill"), report(done)


def test_4_the_next_start_serves_on_triton_at_once(model_dir: Path, gdn_broken: dict[str, str]) -> None:
    done = serve(model_dir, gdn_broken, "the next start (recorded GDN failure)")
    assert done.status == 0 and done.generated == 8, report(done)
    warned = said(done, "jitguard: vLLM chose FlashInfer GDN prefill")
    assert len(warned) == 1, report(done)
    assert "[flashinfer-cached-failure]" in warned[0]
    assert not said(done, "Build of gdn_prefill"), report(done)  # nothing was built again


def test_5_asked_for_flashinfer_it_stops_at_init(model_dir: Path, gdn_broken: dict[str, str]) -> None:
    done = serve(
        model_dir, gdn_broken, "--gdn-prefill-backend flashinfer (recorded failure)", gdn="flashinfer"
    )
    assert done.status != 0 and done.generated is None, report(done)
    assert said(done, "jitguard: FlashInfer GDN prefill was requested (--gdn-prefill-backend flashinfer)")
    assert "[flashinfer-cached-failure]" in done.output


# ---- 3. the sampler ---------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def sampler_broken(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    return broken_env(
        tmp_path_factory.mktemp("sampler-broken")
    )  # VLLM_USE_FLASHINFER_SAMPLER: vLLM's default


def test_6_stock_vllm_dies_on_a_sampler_build_that_fails(
    model_dir: Path, sampler_broken: dict[str, str]
) -> None:
    stock = {**sampler_broken, "JITGUARD_DISABLE": "1"}
    done = serve(model_dir, stock, "stock vLLM, sampler build fails", gdn="triton", sampling="top")
    assert done.status != 0 and done.generated is None, report(done)


def test_7_with_jitguard_the_sampler_fails_over_to_pytorch_and_the_engine_serves(
    model_dir: Path, sampler_broken: dict[str, str]
) -> None:
    done = serve(model_dir, sampler_broken, "jitguard, sampler build fails", gdn="triton", sampling="top")
    assert done.status == 0 and done.generated == 8, report(done)
    [warned] = said(done, "jitguard: FlashInfer top-k/top-p sampler failed on first use")
    assert "PyTorch-native sampler" in warned
    assert recorded(sampler_broken, "sampling"), report(done)


def test_8_the_next_start_takes_the_pytorch_sampler_at_init(
    model_dir: Path, sampler_broken: dict[str, str]
) -> None:
    done = serve(
        model_dir, sampler_broken, "jitguard, recorded sampler failure", gdn="triton", sampling="top"
    )
    assert done.status == 0 and done.generated == 8, report(done)
    [warned] = said(done, "jitguard: vLLM chose FlashInfer top-k/top-p sampler, but it cannot work here")
    assert "[flashinfer-cached-failure]" in warned
    assert not said(done, "failed on first use")
