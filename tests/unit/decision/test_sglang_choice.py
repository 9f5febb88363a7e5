"""The SGLang plugin's decision, alone: which phase FlashInfer was asked for by name, and which findings decide
each phase. The real SGLang code around it is exercised in tests/real/sglang; here the statuses are plain data,
built from the catalog as the GDN resolver builds them."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from jitguard.decision.engine_verdicts import ChoiceStatus, assess, prefill_in_process
from jitguard.decision.sglang_phases import PHASE_CHOICES, STASH, UNKNOWN, named_by, request_of
from jitguard.findings.catalog import make
from jitguard.findings.model import Finding


def status(*codes: str) -> tuple[Finding, ...]:
    return tuple(make(code, backend="flashinfer") for code in codes)


NO_LIBCUDA = status("link-missing-libcuda")
NO_GPU = status("gpu-none", "link-missing-libcuda")
CACHED = status("gdn-cached-failure")


def phase_status(phase: str, findings: tuple[Finding, ...], *, in_process: bool = False) -> ChoiceStatus:
    return assess(PHASE_CHOICES[phase], findings, in_process=in_process)


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
    found = status("link-missing-libcuda", "gpu-arch-unsupported", "gdn-cached-failure")
    judged = phase_status("prefill", found, in_process=True)
    assert [f.code for f in judged.findings] == ["gdn-cached-failure"]


@pytest.mark.parametrize(
    ("era", "majors", "in_process"),
    [("nvcc", [10], True), ("nvcc", [9], False), ("nvcc", [9, 10], False), ("cutedsl", [10], False)],
)
def test_which_prefill_kernel_flashinfer_runs(era: str, majors: list[int], in_process: bool) -> None:
    assert prefill_in_process(era, set(majors)) is in_process
