"""vLLM's engine-core process judges on the fingerprint that ``jitguard doctor`` reports in the same
environment, started as ``LLM()`` starts it (fork) and as ``vllm serve`` does (spawn), with the REAL code of
each release and its real dependencies.

Before this held, ``from vllm import LLM`` imported opencv's ``cv2``, which prepends
``<site-packages>/cv2/../../lib64:`` to LD_LIBRARY_PATH in every process that imports it (once more in each
spawned one): the engine core keyed the failure cache differently from ``jitguard doctor``, ``jitguard
build`` and the process that started it, so a failure recorded outside the engine was never seen inside it
(a full FlashInfer build started instead: tests/gpu/vllm ran 480 s on the H200), and ``jitguard cache``
/ ``doctor --engine vllm`` never showed what the engine recorded.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.slow

SCRIPT = Path(__file__).with_name("engine_core_scenario.py")
MODEL = Path(__file__).resolve().parents[2] / "data" / "models" / "qwen3_next" / "config.json"


def doctor_fingerprint(env: dict[str, str]) -> str:
    """What ``jitguard doctor`` reports where the engine runs: ``env`` holds the release's PYTHONPATH, so it
    sees the FlashInfer and DSL the engine sees (both are part of the fingerprint)."""
    done = subprocess.run(
        [sys.executable, "-m", "jitguard", "doctor", "--json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        stdin=subprocess.DEVNULL,
    )
    fingerprint: str = json.loads(done.stdout)["fingerprint"]
    return fingerprint


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_the_engine_core_judges_on_the_fingerprint_jitguard_doctor_reports(
    release: Any, situations: Any, method: str
) -> None:
    env = situations.machine(VLLM_WORKER_MULTIPROC_METHOD=method)
    result, output = release.run({}, env, script=SCRIPT)
    assert result["method"] == method and result["registered"], output[-4000:]
    assert result["fingerprint"] == doctor_fingerprint(release.environment(env)), (
        f"the engine core ({method}) keyed the failure cache apart from `jitguard doctor`; LD_LIBRARY_PATH "
        f"in each process: {result['ld_library_path']}"
    )


def test_a_failure_jitguard_build_recorded_is_judged_on_in_the_engine_core(
    release: Any, situations: Any
) -> None:
    """The prebuild (``jitguard build flashinfer-gdn``, run where the engine will run, with the FlashInfer the
    release pins) fails for real and records it; the engine core started next must see that record (and take
    Triton/FLA at once) instead of starting the same doomed build. In the CuTeDSL era there is no nvcc module:
    the prebuild says so (exit 2), records nothing, and the engine core sees no record."""
    env = situations.machine()  # this machine: no libcuda, so the real pre-flight stops an nvcc prebuild
    built = subprocess.run(
        [sys.executable, "-m", "jitguard", "build", "flashinfer-gdn", "--model", str(MODEL), "--json"],
        env=release.environment(env),
        capture_output=True,
        text=True,
        timeout=300,
        stdin=subprocess.DEVNULL,
    )
    from jitguard.state.failure_cache import FailureCache

    prebuilt = {r.module: r.fingerprint for r in FailureCache(Path(env["JITGUARD_CACHE_DIR"])).entries()}
    result, _ = release.run({}, env, script=SCRIPT)
    records = result["gdn_records"]
    if release.era == "cutedsl":  # nothing to prebuild: a usage error (2) that says why
        assert built.returncode == 2, built.stdout[-3000:] + built.stderr[-3000:]
        assert "has no nvcc-era GDN prefill module" in built.stdout + built.stderr
        assert prebuilt == {} and records == []
        return
    assert built.returncode == 1, built.stdout[-3000:] + built.stderr[-3000:]
    assert len(records) == 1, (
        f"the engine core (fingerprint {result['fingerprint']}) saw {len(records)} recorded GDN failures; the "
        f"prebuild recorded {prebuilt}"
    )
    [record] = records
    assert record["code"] == "flashinfer-cached-failure", record
    assert "link-missing-libcuda" in " ".join(record["evidence"]), record
