"""The SGLang plugin's decision, alone: which phase FlashInfer was asked for by name, which findings decide each
phase, and what SGLang should then use. The real SGLang code around it is exercised in tests/real/sglang; here
the statuses are plain data, built from the catalog as the GDN resolver builds them."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from jitguard.decision.gdn import BackendStatus
from jitguard.errors import BackendUnavailable
from jitguard.findings.catalog import make
from jitguard.integrations.sglang_choice import (
    STASH,
    UNKNOWN,
    FlashInferHere,
    SglangBackendUnavailable,
    decide,
    fallback_message,
    flashinfer_here,
    named_by,
    phase_status,
    request_of,
)


def status(*codes: str) -> BackendStatus:
    found = tuple(make(code, backend="flashinfer") for code in codes)
    return BackendStatus("flashinfer", not any(f.severity == "error" for f in found), found)


NO_LIBCUDA = FlashInferHere(status("link-missing-libcuda"))
NO_GPU = FlashInferHere(status("gpu-none", "link-missing-libcuda"))
CACHED = FlashInferHere(status("gdn-cached-failure"))


def never() -> FlashInferHere:
    raise AssertionError("FlashInfer must not be looked at")


# ---- asked for by name ------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("phase", "given", "expected"),
    [
        ("prefill", {"linear_attn_prefill_backend": "flashinfer"}, "--linear-attn-prefill-backend"),
        ("prefill", {"linear_attn_backend": "flashinfer"}, "--linear-attn-backend"),
        ("prefill", {"linear_attn_backend": "flashinfer", "linear_attn_prefill_backend": "triton"}, None),
        ("prefill", {"linear_attn_backend": "triton"}, None),
        ("decode", {"linear_attn_decode_backend": "flashinfer"}, "--linear-attn-decode-backend"),
        ("decode", {"linear_attn_decode_backend": None}, None),
        ("verify", {"linear_attn_verify_backend": "flashinfer"}, "--linear-attn-verify-backend"),
        ("verify", {"linear_attn_decode_backend": "flashinfer"}, "--linear-attn-decode-backend"),
        (
            "verify",
            {"linear_attn_decode_backend": "flashinfer", "linear_attn_verify_backend": "triton"},
            None,
        ),
    ],
)
def test_the_option_that_named_flashinfer(phase: str, given: dict[str, object], expected: str) -> None:
    assert named_by(phase, given) == expected


@pytest.mark.parametrize("phase", ["decode", "verify"])
def test_an_unreadable_decode_option_counts_as_sglangs_own_choice(phase: str) -> None:
    assert named_by(phase, {"linear_attn_decode_backend": UNKNOWN}) is None


def test_raw_input_is_what_was_asked_for() -> None:
    args = SimpleNamespace(
        _raw_input={"linear_attn_decode_backend": None, "linear_attn_backend": "triton"},
        linear_attn_decode_backend="flashinfer",  # SGLang's own SM100 default, written after the input
    )
    assert request_of(args)["linear_attn_decode_backend"] is None


def test_without_raw_input_the_kept_decode_option_counts() -> None:
    kept = SimpleNamespace(
        linear_attn_decode_backend="flashinfer", **{STASH: {"linear_attn_decode_backend": None}}
    )
    lost = SimpleNamespace(linear_attn_decode_backend="flashinfer", linear_attn_prefill_backend="flashinfer")
    assert request_of(kept)["linear_attn_decode_backend"] is None
    assert request_of(lost)["linear_attn_decode_backend"] == UNKNOWN
    assert request_of(lost)["linear_attn_prefill_backend"] == "flashinfer"  # SGLang never writes this one


# ---- which findings decide which phase -----------------------------------------------------------------
def test_prefill_is_judged_by_the_whole_gdn_prefill_verdict() -> None:
    assert not phase_status("prefill", NO_LIBCUDA).usable
    assert not phase_status("prefill", CACHED).usable


@pytest.mark.parametrize("phase", ["decode", "verify"])
def test_decode_and_verify_ignore_the_prefill_build_and_its_cached_failure(phase: str) -> None:
    assert phase_status(phase, NO_LIBCUDA).usable
    assert phase_status(phase, CACHED).usable
    doomed = phase_status(phase, NO_GPU)
    assert not doomed.usable and [f.code for f in doomed.findings] == ["gpu-none"]


def test_nvcc_era_prefill_on_blackwell_is_judged_as_an_in_process_kernel() -> None:
    in_process = FlashInferHere(
        status("link-missing-libcuda", "gpu-arch-unsupported", "gdn-cached-failure"), True
    )
    judged = phase_status("prefill", in_process)
    assert [f.code for f in judged.findings] == ["gdn-cached-failure"]


@pytest.mark.parametrize(
    ("era", "majors", "in_process"),
    [("nvcc", [10], True), ("nvcc", [9], False), ("nvcc", [9, 10], False), ("cutedsl", [10], False)],
)
def test_which_prefill_kernel_flashinfer_runs(era: str, majors: list[int], in_process: bool) -> None:
    facts = SimpleNamespace(
        flashinfer=SimpleNamespace(era=era),
        gpu=SimpleNamespace(devices=[SimpleNamespace(major=m) for m in majors]),
    )
    assert flashinfer_here(facts, status()).prefill_in_process is in_process  # type: ignore[arg-type]


# ---- the decision ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("chosen", ["triton", "cutedsl", "flashkda"])
def test_a_choice_other_than_flashinfer_is_left_alone_without_looking(chosen: str) -> None:
    verdict = decide("prefill", chosen, "--linear-attn-prefill-backend", never)
    assert (verdict.backend, verdict.action) == (chosen, "keep")


def test_workable_flashinfer_stands() -> None:
    verdict = decide("prefill", "flashinfer", "--linear-attn-backend", lambda: FlashInferHere(status()))
    assert (verdict.backend, verdict.action) == ("flashinfer", "keep")


def test_sglangs_own_doomed_flashinfer_goes_to_triton() -> None:
    verdict = decide("prefill", "flashinfer", None, lambda: NO_LIBCUDA)
    assert (verdict.backend, verdict.action) == ("triton", "fallback")
    message = fallback_message([verdict])
    assert "[link-missing-libcuda]" in message and "Fix:" in message and "JITGUARD_DISABLE=1" in message


def test_doomed_flashinfer_asked_for_by_name_is_refused_in_sglangs_terms() -> None:
    verdict = decide("decode", "flashinfer", "--linear-attn-backend", lambda: NO_GPU)
    assert verdict.action == "refuse"
    error = SglangBackendUnavailable(verdict)
    assert isinstance(error, BackendUnavailable) and [f.code for f in error.findings] == ["gpu-none"]
    text = str(error)
    assert "(--linear-attn-backend flashinfer)" in text and "[gpu-none]" in text
    assert "--linear-attn-decode-backend triton" in text and "JITGUARD_DISABLE=1" in text
