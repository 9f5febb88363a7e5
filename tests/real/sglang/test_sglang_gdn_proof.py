"""jitguard's own proof of FlashInfer GDN prefill in SGLang, against the REAL code of each SGLang release and the
FlashInfer it pins. SGLang calls its GDN prefill first at the first request (the offline Engine sends no warmup
request), so where jitguard's pre-flight admitted SGLang's FlashInfer prefill (an H200 host as the facts see
it), jitguard calls FlashInfer's real ``chunk_gated_delta_rule`` once, when the scheduler sets up SGLang's
real GDN attention backend, on a tiny input of the model's shapes. On this CPU the call fails, a cause the
pre-flight did not foresee: ``auto`` moves the backend's prefill to Triton before the engine serves, a named
FlashInfer stops the start, the failure is recorded by fingerprint, and the next start decides in the
pre-flight. A pass recorded under this start's key skips the call (proof_scenario.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.slow

SCENARIO = Path(__file__).with_name("proof_scenario.py")
CUDA_TORCH = "2.11.0+cu130"  # the one fact a CPU venv cannot have (see test_sglang_linear_attn_choice.py)
PROOF_FAILED = "jitguard: FlashInfer linear attention prefill failed on first use: [engine-proof-failed]"
BY_RECORD = "proven by record, no call at"
NAMED = {"options": {"linear_attn_prefill_backend": "flashinfer"}}
PER_RUNNER = (0, 5, 18)

Result = tuple[dict[str, Any], str]


def sglang_picks_prefill(release: Any) -> dict[str, Any]:
    """A run in which SGLang itself picks FlashInfer prefill (0.5.18+: its validated GDN domain, passed as its
    attention registry passes it; earlier releases never pick it on their own)."""
    if release.version_tuple < PER_RUNNER:
        pytest.skip(f"SGLang {release.version} never picks FlashInfer GDN prefill by itself")
    return {"options": {}, "prefill_default": "flashinfer"}


def proof_failures(output: str) -> list[str]:
    return [line for line in output.splitlines() if PROOF_FAILED in line]


@pytest.fixture(scope="module")
def auto(release: Any, hosts: Any) -> tuple[Result, Result]:
    env = hosts.gpu("H200", libcuda=True)
    spec = {"runs": [sglang_picks_prefill(release), NAMED], "torch_build": CUDA_TORCH}
    first = release.run(spec, env, script=SCENARIO)
    again = release.run(spec, env, script=SCENARIO)  # the next start, same host, same caches
    return first, again


@pytest.fixture(scope="module")
def named(release: Any, hosts: Any) -> Result:
    env = hosts.gpu("H200", libcuda=True)
    return release.run({"runs": [NAMED], "torch_build": CUDA_TORCH}, env, script=SCENARIO)


@pytest.fixture(scope="module")
def recorded(release: Any, hosts: Any) -> Result:
    env = hosts.gpu("H200", libcuda=True)
    spec = {"runs": [NAMED], "torch_build": CUDA_TORCH, "record_pass": True}
    return release.run(spec, env, script=SCENARIO)


def test_a_failed_proof_moves_sglangs_own_prefill_choice_to_triton_before_it_serves(auto: Any) -> None:
    (result, output), _ = auto
    run = result["runs"][0]
    assert run["error"] is None, run["error"]
    assert run["chosen"]["prefill"] == "flashinfer"  # pre-flight passed: SGLang's choice stood
    assert run["extend"] == "TritonGDNKernel"
    assert run["runner_prefill"] == "triton"
    assert len(proof_failures(output)) == 1, output[-4000:]
    assert "Triton" in proof_failures(output)[0] and "recorded" in proof_failures(output)[0]
    assert not result["proven"]


def test_a_named_prefill_after_a_failed_proof_is_refused_in_the_same_process(auto: Any) -> None:
    (result, _), _ = auto
    error = result["runs"][1]["error"]
    assert error is not None and "BackendUnavailable" in error["bases"]
    assert "engine-proof-failed" in error["codes"]


def test_a_failed_proof_is_recorded_by_fingerprint(auto: Any) -> None:
    (result, _), _ = auto
    expected = {
        "module": "gdn-prefill/flashinfer",
        "codes": ["engine-proof-failed"],
        "this_fingerprint": True,
    }
    assert expected in result["failure_cache"]


def test_the_next_start_decides_in_the_pre_flight(auto: Any) -> None:
    _, (result, output) = auto
    assert "gdn-cached-failure" in result["status"]["blocking"]
    run = result["runs"][0]
    assert run["chosen"]["prefill"] == "triton"  # SGLang's own choice, corrected at its choice: no call
    assert run["extend"] == "TritonGDNKernel"
    named = result["runs"][1]["error"]
    assert named is not None and "gdn-cached-failure" in named["codes"]
    assert proof_failures(output) == []


def test_a_failed_proof_of_named_flashinfer_stops_the_start_with_the_evidence(named: Result) -> None:
    result, output = named
    error = result["runs"][0]["error"]
    assert error is not None and "BackendUnavailable" in error["bases"]
    assert error["codes"] == ["engine-proof-failed"]
    assert "--linear-attn-prefill-backend flashinfer" in error["message"]
    assert "jitguard doctor --deep --backend flashinfer" in error["message"]
    assert proof_failures(output) == []  # the stop says it; no fallback line
    assert {
        "module": "gdn-prefill/flashinfer",
        "codes": ["engine-proof-failed"],
        "this_fingerprint": True,
    } in (result["failure_cache"])


def test_a_recorded_pass_skips_the_call_and_proves_by_record(recorded: Result) -> None:
    result, output = recorded
    run = result["runs"][0]
    # The call would fail on this CPU: FlashInfer kept and nothing recorded prove it was not made.
    assert run["error"] is None, run["error"]
    assert run["extend"] == "FlashInferGDNKernel"
    assert result["proven"]
    lines = [line for line in output.splitlines() if BY_RECORD in line]
    assert len(lines) == 1 and result["recorded_key"] in lines[0], output[-3000:]
    assert result["failure_cache"] == []
