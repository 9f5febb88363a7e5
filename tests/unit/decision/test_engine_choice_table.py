"""The table of an engine's FlashInfer choices and its verdicts, alone: findings in (built from the catalog
exactly as the pre-flight builds them), a status and an action out."""

from __future__ import annotations

import pytest

from jitguard.decision.engine_verdicts import (
    ATTENTION,
    BY_KEY,
    CHOICES,
    GDN_PREFILL,
    KERNELS,
    MOE,
    SAMPLER,
    ChoiceUnavailable,
    assess,
    verdict,
)
from jitguard.errors import BackendUnavailable
from jitguard.findings.catalog import make

NO_LIBCUDA = make("link-missing-libcuda", backend="flashinfer", evidence=["cannot find -lcuda"])
NO_NVCC = make("nvcc-missing", backend="flashinfer")
OLD_NVCC = make("nvcc-too-old", backend="flashinfer")  # dooms GDN's SM90 kernel only
GPU_ARCH = make("gpu-arch-unsupported", backend="flashinfer")  # about GDN's kernels, not the sampler's
UNKNOWN = make("fact-unavailable", backend="flashinfer", fact="libstdcxx", error="no pyelftools")
RECORDED = make(
    "flashinfer-cached-failure", backend="flashinfer", title=SAMPLER.title, module="sampling", previous="x"
)


def test_the_table_names_each_choice_once_with_its_modules() -> None:
    assert [c.key for c in CHOICES] == [
        "gdn-prefill",
        "sampler",
        "attention",
        "kv-cache",
        "moe",
        "flashinfer-ops",
    ]
    assert BY_KEY["sampler"] is SAMPLER
    assert all(c.modules and c.fallback and c.default for c in CHOICES)
    assert KERNELS.named_by is None and all(c.named_by for c in CHOICES if c is not KERNELS)


def test_a_jit_doom_blocks_a_choice_that_must_build() -> None:
    status = assess(SAMPLER, [NO_LIBCUDA, GPU_ARCH, OLD_NVCC])
    assert not status.usable
    assert [f.code for f in status.findings] == ["link-missing-libcuda"]  # GDN-only findings left out


def test_a_prebuilt_module_makes_the_toolchain_moot_but_not_its_load() -> None:
    assert assess(SAMPLER, [NO_LIBCUDA, NO_NVCC], prebuilt=["sampling"]).usable
    glibcxx = make("so-glibcxx-missing", backend="flashinfer", so_path="sampling.so")
    assert not assess(SAMPLER, [NO_LIBCUDA], [glibcxx], prebuilt=["sampling"]).usable


def test_attention_is_prebuilt_only_when_prefill_and_decode_both_are() -> None:
    assert not assess(ATTENTION, [NO_LIBCUDA], prebuilt=["batch_prefill_with_kv_cache_x"]).usable
    both = ["batch_prefill_with_kv_cache_x", "batch_decode_with_kv_cache_x"]
    assert assess(ATTENTION, [NO_LIBCUDA], prebuilt=both).usable


def test_the_umbrella_gate_stands_while_any_module_behind_it_is_prebuilt() -> None:
    # has_flashinfer() answers for every kernel behind it: "no" would turn off the prebuilt one too.
    assert not assess(KERNELS, [NO_NVCC]).usable
    status = assess(KERNELS, [NO_NVCC, NO_LIBCUDA], prebuilt=["norm"])
    assert status.usable and status.findings == ()
    glibcxx = make("so-glibcxx-missing", backend="flashinfer", so_path="norm.so")
    assert not assess(KERNELS, [NO_NVCC], [glibcxx], prebuilt=["norm"]).usable  # its load still decides


def test_every_prefix_of_the_umbrella_names_a_real_module() -> None:
    # flashinfer-jit-cache 0.6.6's module names (tests/data/flashinfer-wheels, from the release's AOT list).
    from pathlib import Path

    listing = Path(__file__).resolve().parents[2] / "data" / "flashinfer-wheels"
    text = (listing / "flashinfer_jit_cache-0.6.6.modules").read_text()
    names = [n for n in text.splitlines() if n[:1].isalpha()]
    jit_only = {"bf16_gemm"}  # bf16_gemm_cutlass: built at first use, not part of the 0.6.6 jit-cache
    for choice in CHOICES:
        missing = [
            p for p in choice.required if p not in jit_only and not any(n.startswith(p) for n in names)
        ]
        assert not missing, f"{choice.key}: no module of 0.6.6 starts with {missing}"


def test_a_matching_jit_cache_prebuilds_everything() -> None:
    assert assess(MOE, [NO_LIBCUDA], jit_cache=True).usable


def test_gdn_keeps_every_finding_of_the_gdn_op() -> None:
    status = assess(GDN_PREFILL, [OLD_NVCC])
    assert not status.usable and [f.code for f in status.findings] == ["nvcc-too-old"]


def test_a_recorded_failure_blocks_and_a_classified_cause_is_named_first() -> None:
    status = assess(SAMPLER, [NO_LIBCUDA], [RECORDED])
    assert status.primary is not None and status.primary.code == "link-missing-libcuda"
    only = assess(SAMPLER, [], [RECORDED])
    assert only.primary is not None and only.primary.code == "flashinfer-cached-failure"


def test_unknown_is_not_doomed() -> None:
    status = assess(SAMPLER, [UNKNOWN])
    assert status.usable and not status.verified


@pytest.mark.parametrize(
    ("usable", "named", "action"),
    [(True, False, "keep"), (True, True, "keep"), (False, False, "fallback"), (False, True, "refuse")],
)
def test_the_verdict_for_each_case(usable: bool, named: bool, action: str) -> None:
    status = assess(SAMPLER, [] if usable else [NO_LIBCUDA])
    assert verdict(status, named=named).action == action


def test_a_refusal_says_how_it_was_named_what_to_type_instead_and_why() -> None:
    status = assess(SAMPLER, [NO_LIBCUDA])
    error = ChoiceUnavailable(status, "VLLM_USE_FLASHINFER_SAMPLER=1", "unset VLLM_USE_FLASHINFER_SAMPLER")
    assert isinstance(error, BackendUnavailable)
    message = str(error)
    assert "FlashInfer top-k/top-p sampler was requested (VLLM_USE_FLASHINFER_SAMPLER=1)" in message
    assert "[link-missing-libcuda]" in message and "Fix:" in message
    assert "Or unset VLLM_USE_FLASHINFER_SAMPLER" in message and "PyTorch-native sampler" in message
    assert error.findings == (NO_LIBCUDA,)
