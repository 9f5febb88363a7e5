"""What each backend takes, its FlashInfer era, and the real load of the Triton backend on this machine
(fla-core is installed; triton is there only when pip chose torch's CUDA build, which brings it)."""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import os
from typing import Any

import pytest

from jitguard.decision.gdn_resolution import CallSpec
from jitguard.findings.classify import classify_exception
from jitguard.gdn.backends import flashinfer, triton
from jitguard.gdn.call import GdnCall

QWEN = CallSpec("cuda", "bfloat16", 128, 16, 16, 32)


@pytest.mark.parametrize(
    ("version", "era"),
    [
        ("0.6.2", None),
        ("0.6.3", "nvcc"),
        ("0.6.6", "nvcc"),
        ("0.6.13", "nvcc"),
        ("0.6.14", "cutedsl"),
        ("0.7.4", "cutedsl"),
        ("garbage", None),
        (None, None),
    ],
)
def test_flashinfer_era_by_version(version: str | None, era: str | None) -> None:
    assert flashinfer.era(version) == era


def test_the_installed_flashinfer_is_the_nvcc_era() -> None:
    assert (
        flashinfer.installed_version() == "0.6.6" and flashinfer.era(flashinfer.installed_version()) == "nvcc"
    )


def test_flashinfer_takes_a_qwen35_cuda_call() -> None:
    assert flashinfer.input_findings(QWEN) == []
    assert flashinfer.input_findings(CallSpec("cuda", "float16", 128, 8, 4, 4)) == []  # GQA


@pytest.mark.parametrize(
    ("spec", "reason"),
    [
        (CallSpec("cpu", "bfloat16", 128, 16, 16, 32), "the inputs are on cpu"),
        (CallSpec("cuda", "float32", 128, 16, 16, 32), "float16 and bfloat16 only"),
        (CallSpec("cuda", "bfloat16", 64, 16, 16, 32), "D=64"),
    ],
)
def test_flashinfer_refuses_what_it_cannot_take(spec: CallSpec, reason: str) -> None:
    (finding,) = flashinfer.input_findings(spec)
    assert finding.code == "gdn-input-unsupported" and finding.severity == "error"
    assert reason in finding.cause and finding.backend == "flashinfer"


def test_triton_takes_float32_and_small_heads_but_not_float64_or_cpu() -> None:
    assert triton.input_findings(CallSpec("cuda", "float32", 64, 2, 2, 8)) == []
    (finding,) = triton.input_findings(CallSpec("cpu", "float64", 128, 2, 2, 8))
    assert "on cpu" in finding.cause and "float64" in finding.cause


TRITON_INSTALLED = importlib.util.find_spec("triton") is not None


@pytest.fixture
def unloaded_triton(monkeypatch: pytest.MonkeyPatch) -> None:
    """The Triton backend as a fresh process has it: nothing loaded yet (a load that worked is kept)."""
    monkeypatch.setattr(triton, "_kernel", None)


@pytest.mark.skipif(
    TRITON_INSTALLED, reason="triton is installed here: FLA imports, no load failure to classify"
)
@pytest.mark.usefixtures("unloaded_triton")
def test_triton_load_fails_without_triton_and_is_classified(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FLA_FLASH_QLA", "1")  # the user's own choice is kept
    with pytest.raises(ImportError) as caught:
        triton.load()
    assert os.environ["FLA_FLASH_QLA"] == "1"
    findings = classify_exception(triton.NAME, triton.TITLE, "load", caught.value, alternative="torch")
    head = findings[0]
    assert head.code == "gdn-first-use-failed" and "triton" in head.cause
    assert head.title == "FLA Triton GDN prefill failed to load on first use"
    assert any("Or use backend='torch'" in fix.text for fix in head.fixes)


@pytest.mark.skipif(not TRITON_INSTALLED, reason="triton is not installed here: the load fails (test above)")
@pytest.mark.usefixtures("unloaded_triton")
def test_triton_load_with_triton_installed_takes_flas_kernel() -> None:
    """With no GPU, FLA still imports (it warns and rolls back to CPU); the kernel is FLA's own function."""
    triton.load()
    assert triton._kernel is importlib.import_module("fla.ops.gated_delta_rule").chunk_gated_delta_rule


@pytest.mark.usefixtures("unloaded_triton")
def test_triton_load_turns_flash_qla_off_unless_set(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FLA_FLASH_QLA", raising=False)
    try:
        with contextlib.suppress(ImportError):  # the variable is set before FLA is imported, either way
            triton.load()
        assert os.environ.get("FLA_FLASH_QLA") == "0"
    finally:
        os.environ.pop("FLA_FLASH_QLA", None)


def test_flashinfer_gets_a_packed_alpha_and_beta_from_strided_gates(monkeypatch: pytest.MonkeyPatch) -> None:
    """FlashInfer reads alpha/beta as packed [T, H] fp32 without checking strides; exp() keeps g's strides, so a
    transposed g must be made contiguous. The kernel cannot run here: a stand-in records what it was given."""
    import torch

    seen: dict[str, torch.Tensor] = {}

    def kernel(q: Any, k: Any, v: Any, alpha: Any, beta: Any, **kw: Any) -> Any:
        seen.update(q=q, alpha=alpha, beta=beta)
        return q

    monkeypatch.setattr(flashinfer, "_kernel", kernel)
    T, H = 6, 4
    g = -torch.rand(H, T).t()  # [T, H] view of a [H, T] buffer
    beta = torch.rand(H, T, dtype=torch.bfloat16).t()
    q = torch.randn(T, H, 128, dtype=torch.bfloat16)
    cu = torch.tensor([0, T])
    flashinfer.run(GdnCall(q, q, q, g, beta, cu, 0.1))
    assert seen["alpha"].is_contiguous() and seen["beta"].is_contiguous()
    assert seen["alpha"].dtype == seen["beta"].dtype == torch.float32
    torch.testing.assert_close(seen["alpha"], g.exp())
    torch.testing.assert_close(seen["beta"], beta.float())
