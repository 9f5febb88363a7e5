"""The engine-wait warning: a build foreseen to outlast vLLM's wait for its engine says so, with the fixes."""

from __future__ import annotations

from jitguard.decision.engine_wait import VLLM_READY_TIMEOUT_ENV, ready_timeout_warning, vllm_ready_timeout


def test_the_variable_sets_the_wait_and_vllm_has_a_default() -> None:
    assert vllm_ready_timeout({VLLM_READY_TIMEOUT_ENV: "1200"}, in_vllm=False) == 1200
    assert vllm_ready_timeout({}, in_vllm=True) == 600
    assert vllm_ready_timeout({}, in_vllm=False) is None  # outside vLLM nobody waits
    for bad in ("", "soon", "-5", "0", "inf", "nan"):
        assert vllm_ready_timeout({VLLM_READY_TIMEOUT_ENV: bad}, in_vllm=True) == 600
        assert vllm_ready_timeout({VLLM_READY_TIMEOUT_ENV: bad}, in_vllm=False) is None


def test_a_build_longer_than_the_default_wait_in_vllm_warns_with_both_fixes() -> None:
    message = ready_timeout_warning("gdn_prefill_sm90", 900, {}, in_vllm=True)
    assert message is not None
    assert "about 15 min" in message and f"{VLLM_READY_TIMEOUT_ENV}=600 s" in message
    assert "jitguard build flashinfer-gdn" in message
    assert f"export {VLLM_READY_TIMEOUT_ENV}=1350" in message  # 1.5 times the estimate


def test_a_build_within_the_wait_or_without_an_estimate_says_nothing() -> None:
    assert ready_timeout_warning("gdn_prefill_sm90", 500, {}, in_vllm=True) is None
    assert ready_timeout_warning("gdn_prefill_sm90", 600, {}, in_vllm=True) is None
    assert ready_timeout_warning("gdn_prefill_sm90", None, {}, in_vllm=True) is None
    assert (
        ready_timeout_warning("gdn_prefill_sm90", 900, {VLLM_READY_TIMEOUT_ENV: "1800"}, in_vllm=True) is None
    )


def test_outside_vllm_only_the_variable_makes_a_wait() -> None:
    assert ready_timeout_warning("sampling", 900, {}, in_vllm=False) is None
    message = ready_timeout_warning("sampling", 3, {VLLM_READY_TIMEOUT_ENV: "1"}, in_vllm=False)
    assert message is not None
    assert "jitguard build flashinfer-gdn" not in message  # not a GDN module: prebuild it generally
    assert "in the image" in message
    assert f"export {VLLM_READY_TIMEOUT_ENV}=5" in message
