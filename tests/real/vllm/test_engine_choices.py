"""vLLM's other FlashInfer choices through the REAL vLLM code (choices_scenario.py), each release with the
FlashInfer it pins: the top-k/top-p sampler, the attention backend (vLLM's real FlashInfer backend, importing
that FlashInfer) and its FP8 KV cache in vLLM's own priority walk, and the has_flashinfer gates of MoE and
the other kernels. Each module-scoped fixture is one engine process in one machine situation; the facts behind
each verdict come from jitguard's real probes (a real trial link against real libraries)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.slow

SCENARIO = Path(__file__).with_name("choices_scenario.py")
CUDA_TORCH = "2.11.0+cu130"
SPEC: dict[str, Any] = {
    "torch_build": CUDA_TORCH,
    "sampler": ["default", "named", "off"],
    "attention": [["auto", "auto"], ["auto", "fp8"], ["FLASHINFER", "auto"]],
    "gates": ["default", "moe-named"],
}


def minor(release: Any) -> int:
    return int(release.version.split(".")[1])


def has_v1_sampler(release: Any) -> bool:
    """0.17 - 0.33 build ``TopKTopPSampler`` (the V1 model runner); 0.34 removed both."""
    return minor(release) < 34


def lines(output: str, needle: str) -> list[str]:
    return [line for line in output.splitlines() if needle in line]


def sampler_run(result: dict[str, Any], mode: str) -> dict[str, Any]:
    return next(r for r in result["sampler"] if r["mode"] == mode)


def v2_run(result: dict[str, Any], mode: str) -> dict[str, Any]:
    """The V2 model runner's sampler module asked in ``mode`` (0.23+; the default runner for Qwen3, Llama
    and Mistral in 0.24)."""
    v2 = result["sampler_v2"]
    assert v2["present"], v2
    return next(r for r in v2["runs"] if r["mode"] == mode)


def attention_run(result: dict[str, Any], selected: str, kv: str) -> dict[str, Any]:
    return next(r for r in result["attention"] if r["selected"] == selected and r["kv_cache_dtype"] == kv)


def gates_run(result: dict[str, Any], mode: str) -> dict[str, Any]:
    return next(r for r in result["gates"] if r["mode"] == mode)


@pytest.fixture(scope="module")
def stock(release: Any, situations: Any) -> tuple[dict[str, Any], str]:
    """vLLM without jitguard (JITGUARD_DISABLE=1) on a host where FlashInfer's JIT link fails."""
    env = situations.hopper(libcuda=False)
    env["JITGUARD_DISABLE"] = "1"
    return release.run(SPEC, env, script=SCENARIO)


@pytest.fixture(scope="module")
def doomed(release: Any, situations: Any) -> tuple[dict[str, Any], str]:
    return release.run(SPEC, situations.hopper(libcuda=False), script=SCENARIO)


@pytest.fixture(scope="module")
def workable(release: Any, situations: Any) -> tuple[dict[str, Any], str]:
    return release.run(SPEC, situations.hopper(libcuda=True), script=SCENARIO)


@pytest.fixture(scope="module")
def sampling_failed(release: Any, situations: Any) -> tuple[dict[str, Any], str]:
    spec = {**SPEC, "failures": ["sampling"]}
    return release.run(spec, situations.hopper(libcuda=True), script=SCENARIO)


@pytest.fixture(scope="module")
def kernels_failed(release: Any, situations: Any) -> tuple[dict[str, Any], str]:
    """Another FlashInfer kernel (``norm``) failed at an earlier start; the sampler's modules did not."""
    spec = {**SPEC, "failures": ["norm"]}
    return release.run(spec, situations.hopper(libcuda=True), script=SCENARIO)


# ---- stock vLLM picks FlashInfer here, doomed or not ------------------------------------------------------
def test_stock_vllm_picks_flashinfer_for_each_choice(stock: tuple[dict[str, Any], str], release: Any) -> None:
    result, output = stock
    assert not result["registered"] and not any(result["hooked"].values())
    if has_v1_sampler(release):
        default = "forward_native" if minor(release) < 21 else "forward_cuda"  # 0.17-0.20: opt-in only
        assert sampler_run(result, "default")["forward"] == default
        assert sampler_run(result, "named")["forward"] == "forward_cuda"
    else:
        assert result["sampler"] == []
        assert v2_run(result, "default")["use_flashinfer"] is True
    assert attention_run(result, "auto", "auto")["backend"] == "FlashInferBackend"  # first on Blackwell
    assert attention_run(result, "FLASHINFER", "auto")["backend"] == "FlashInferBackend"
    assert gates_run(result, "default")["answers"]["has_flashinfer"] is True  # nvcc is on PATH here
    assert "jitguard" not in output


# ---- FlashInfer's JIT link fails here (no libcuda) --------------------------------------------------------
def test_every_jit_built_choice_sees_the_missing_libcuda(
    doomed: tuple[dict[str, Any], str], release: Any
) -> None:
    result, _ = doomed
    assert result["registered"] and all(result["hooked"].values()), result["hooked"]
    gdn = result["statuses"].pop("gdn-prefill")
    for key, status in result["statuses"].items():  # nvcc JIT modules in every FlashInfer era
        assert status["blocking"] == ["link-missing-libcuda"], (key, status)
    if release.era == "nvcc":  # the GDN prefill module is one of them
        assert gdn["blocking"] == ["link-missing-libcuda"], gdn
    else:  # CuTeDSL compiles it in-process: nothing is linked, so this host can run it
        assert gdn["usable"] and "link-missing-libcuda" not in gdn["codes"], gdn


def test_the_sampler_falls_back_to_pytorch_with_one_warning(
    doomed: tuple[dict[str, Any], str], release: Any
) -> None:
    result, output = doomed
    if has_v1_sampler(release):
        assert sampler_run(result, "default")["forward"] == "forward_native"
        assert sampler_run(result, "off")["forward"] == "forward_native"
    else:
        assert v2_run(result, "default")["use_flashinfer"] is False
    warned = lines(output, "jitguard: vLLM chose FlashInfer top-k/top-p sampler")
    assert len(warned) == (1 if minor(release) >= 21 else 0), output[-3000:]
    if warned:
        assert "[link-missing-libcuda]" in warned[0] and "Fix:" in warned[0]
        assert "PyTorch-native sampler" in warned[0]


def test_the_v2_runners_sampler_takes_vllms_own_sampling_too(
    doomed: tuple[dict[str, Any], str], stock: tuple[dict[str, Any], str], release: Any
) -> None:
    # Found on the H200 with vLLM 0.24: a dense Qwen3 runs on the V2 model runner, whose Sampler asks
    # flashinfer_sampler_supported() itself and never builds a TopKTopPSampler; guarding __init__ alone let
    # the doomed sampling build run and take the engine down.
    if minor(release) < 23:
        assert not doomed[0]["sampler_v2"]["present"]
        return
    result, output = doomed
    assert all(result["sampler_v2"]["guarded"].values()), result["sampler_v2"]
    assert v2_run(stock[0], "default")["use_flashinfer"] is True  # stock: FlashInfer, doomed
    assert v2_run(result, "default")["use_flashinfer"] is False
    assert v2_run(result, "off")["use_flashinfer"] is False
    error = v2_run(result, "named")["error"]
    assert error is not None and "BackendUnavailable" in error["bases"], error
    assert error["codes"] == ["link-missing-libcuda"] and "VLLM_USE_FLASHINFER_SAMPLER=1" in error["message"]
    # one warning in the process, whichever runner asked first
    assert len(lines(output, "jitguard: vLLM chose FlashInfer top-k/top-p sampler")) == 1


def test_the_first_use_fallback_samples_with_this_releases_own_functions(
    doomed: tuple[dict[str, Any], str],
) -> None:
    native = doomed[0]["native_sample"]
    assert native == {"shape": [4], "in_top_k": True, "logits_untouched": True}


def test_a_named_sampler_stops_at_init(doomed: tuple[dict[str, Any], str], release: Any) -> None:
    # 0.34's predicate asks has_flashinfer() first: the umbrella's "no" must not turn this into vLLM's own
    # RuntimeError ("FlashInfer kernels are disabled"), without the cause or the fix.
    run = sampler_run if has_v1_sampler(release) else v2_run
    error = run(doomed[0], "named")["error"]
    assert error is not None and "BackendUnavailable" in error["bases"]
    assert error["codes"] == ["link-missing-libcuda"]
    assert "VLLM_USE_FLASHINFER_SAMPLER=1" in error["message"]
    assert "unset VLLM_USE_FLASHINFER_SAMPLER" in error["message"]


def test_attention_takes_the_next_backend_in_vllms_priority_walk(doomed: tuple[dict[str, Any], str]) -> None:
    result, output = doomed
    for kv in ("auto", "fp8"):
        run = attention_run(result, "auto", kv)
        assert run["error"] is None, run["error"]
        assert run["backend"] not in (None, "FlashInferBackend")
    assert len(lines(output, "jitguard: vLLM chose FlashInfer attention, but")) == 1
    assert len(lines(output, "jitguard: vLLM chose FlashInfer attention with an FP8 KV cache, but")) == 1


def test_a_named_flashinfer_attention_backend_stops_at_init(doomed: tuple[dict[str, Any], str]) -> None:
    error = attention_run(doomed[0], "FLASHINFER", "auto")["error"]
    assert error is not None and "BackendUnavailable" in error["bases"]
    assert "link-missing-libcuda" in error["codes"]
    assert "--attention-backend FLASHINFER" in error["message"]


def test_the_gates_answer_no_and_a_named_moe_backend_stops(doomed: tuple[dict[str, Any], str]) -> None:
    result, output = doomed
    answers = gates_run(result, "default")["answers"]
    assert answers == {
        "has_flashinfer": False,
        "has_flashinfer_moe": False,
        "has_flashinfer_cutlass_fused_moe": False,
    }
    error = gates_run(result, "moe-named")["error"]
    assert error is not None and "BackendUnavailable" in error["bases"]
    assert "--moe-backend flashinfer_cutlass" in error["message"]
    assert len(lines(output, "jitguard: vLLM chose FlashInfer's other JIT kernels")) == 1


# ---- FlashInfer can work here -----------------------------------------------------------------------------
def test_workable_flashinfer_keeps_every_choice_silently(
    workable: tuple[dict[str, Any], str], stock: tuple[dict[str, Any], str]
) -> None:
    result, output = workable
    assert all(s["usable"] for s in result["statuses"].values()), result["statuses"]
    assert result["sampler"] == stock[0]["sampler"]
    assert result["sampler_v2"].get("runs") == stock[0]["sampler_v2"].get("runs")
    assert result["attention"] == stock[0]["attention"]
    assert gates_run(result, "default") == gates_run(stock[0], "default")
    assert lines(output, "cannot work here") == []


# ---- a failure recorded by the build hook at an earlier start ---------------------------------------------
def test_a_recorded_sampling_failure_sends_only_the_sampler_to_pytorch(
    sampling_failed: tuple[dict[str, Any], str], release: Any
) -> None:
    result, output = sampling_failed
    assert result["statuses"]["sampler"]["blocking"] == ["flashinfer-cached-failure"]
    assert attention_run(result, "auto", "auto")["backend"] == "FlashInferBackend"
    run = sampler_run if has_v1_sampler(release) else v2_run
    error = run(result, "named")["error"]
    assert error is not None and error["codes"] == ["flashinfer-cached-failure"]
    if minor(release) >= 21:
        if has_v1_sampler(release):
            assert sampler_run(result, "default")["forward"] == "forward_native"
        else:
            assert v2_run(result, "default")["use_flashinfer"] is False
        [warned] = lines(output, "jitguard: vLLM chose FlashInfer top-k/top-p sampler")
        assert "[flashinfer-cached-failure]" in warned and "FlashInfer's sampling module" in warned


def test_another_kernels_recorded_failure_leaves_the_sampler_to_its_own_verdict(
    request: pytest.FixtureRequest, stock: tuple[dict[str, Any], str], release: Any
) -> None:
    # 0.34's flashinfer_sampler_supported asks has_flashinfer() before anything else; jitguard's umbrella
    # verdict (one of FlashInfer's other kernels cannot work) must not turn the sampler off there.
    if minor(release) < 34:
        pytest.skip(f"vLLM {release.version}'s sampler predicate does not ask has_flashinfer()")
    result, output = request.getfixturevalue("kernels_failed")
    assert result["statuses"]["flashinfer-ops"]["blocking"] == ["flashinfer-cached-failure"]
    assert result["statuses"]["sampler"]["usable"] is True
    assert result["sampler_v2"]["runs"] == stock[0]["sampler_v2"]["runs"]  # FlashInfer, named or not
    assert v2_run(result, "named") == {"mode": "named", "use_flashinfer": True, "error": None}
    assert gates_run(result, "default")["answers"]["has_flashinfer"] is False  # asked on its own
    assert lines(output, "jitguard: vLLM chose FlashInfer top-k/top-p sampler") == []
