"""All three GDN prefill backends against the float64 recurrence on an H200 (marker `gpu`).

Run on the GPU host (flashinfer-python 0.6.6, fla-core 0.6.0, torch 2.11 cu130, triton 3.6):
    FLASHINFER_WORKSPACE_BASE=<prebuilt cache> pytest -m gpu tests/gpu/test_gdn_backends.py -v
The first FlashInfer call JIT-builds its GDN module unless the workspace already holds it (~6 min on 16 cores).
Before every run the CUDA caching allocator is filled with NaN, so an output element a kernel forgets to write
shows up as NaN instead of as stale zeros.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

from jitguard.decision.gdn_resolution import CallSpec
from jitguard.gdn.reference import recurrent_gated_delta_rule
from jitguard.gdn.shapes import GdnInputs, make_inputs

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]

BACKENDS = ("flashinfer", "triton", "torch")
# (Hq, Hk, Hv): Qwen3.5 / Qwen3-Next at TP1 (16/32), equal heads (16/16), per rank at TP8 (2/8), and GQA.
HEADS = [
    pytest.param((16, 16, 32), id="gva-16-32"),
    pytest.param((16, 16, 16), id="mha-16-16"),
    pytest.param((2, 2, 8), id="gva-2-8"),
    pytest.param((8, 4, 4), id="gqa-8-4"),
]
RAGGED = (300, 1, 64, 129, 77, 2)  # chunk edges, length-1 sequences
OUT_RMS_TOL = 5e-3  # FLA's criterion: RMS(ref - out) / RMS(ref)
STATE_RMS_TOL = 5e-3


def poison_allocator(megabytes: int = 512) -> None:
    """Fill the caching allocator's free memory with 0xFF bytes, a NaN in fp32, fp16 and bf16 alike (an fp32
    NaN read as bf16 would be half zeros): the next allocations are carved from it."""
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    junk = torch.full((megabytes * 1024 * 1024,), 255, dtype=torch.uint8, device="cuda")
    torch.cuda.synchronize()
    del junk


def rms_rel(a: torch.Tensor, ref: torch.Tensor) -> float:
    ref = ref.double()
    return float((a.double() - ref).pow(2).mean().sqrt() / ref.pow(2).mean().sqrt())


def reference(x: GdnInputs, l2: bool) -> tuple[torch.Tensor, torch.Tensor]:
    return recurrent_gated_delta_rule(
        x.q, x.k, x.v, x.g, x.beta, cu_seqlens=x.cu_seqlens, initial_state=x.initial_state, use_qk_l2norm=l2
    )


def run(x: GdnInputs, backend: str, *, l2: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    poison_allocator()
    o, state = x.run(backend=backend, use_qk_l2norm=l2)
    torch.cuda.synchronize()
    assert state is not None
    return o, state


def check(o: torch.Tensor, state: torch.Tensor, ref: tuple[torch.Tensor, torch.Tensor], what: str) -> None:
    ref_o, ref_state = ref
    assert o.shape == ref_o.shape and state.shape == ref_state.shape, what
    assert state.dtype == torch.float32, what
    assert not torch.isnan(o).any(), (
        f"{what}: NaN in the output (unwritten memory or a wrong gate convention)"
    )
    assert not torch.isnan(state).any(), f"{what}: NaN in the final state"
    errors = f"output rms-rel {rms_rel(o, ref_o):.2e}, state rms-rel {rms_rel(state, ref_state):.2e}"
    assert rms_rel(o, ref_o) <= OUT_RMS_TOL, f"{what}: {errors}"
    assert rms_rel(state, ref_state) <= STATE_RMS_TOL, f"{what}: {errors}"


def test_poisoning_reaches_the_next_allocation() -> None:
    for dtype in (torch.bfloat16, torch.float32):
        poison_allocator()  # isnan() below writes its own result into the pool: poison again each time
        fresh = torch.empty(600, 32, 128, dtype=dtype, device="cuda")
        assert torch.isnan(fresh).all(), f"{dtype}: the allocator did not hand back poisoned memory"
        del fresh


@pytest.mark.timeout(1800)  # FlashInfer 0.6.6 may JIT-build its GDN module on first use
@pytest.mark.parametrize("heads", HEADS)
@pytest.mark.parametrize("backend", BACKENDS)
def test_backend_matches_the_float64_recurrence(backend: str, heads: tuple[int, int, int]) -> None:
    hq, hk, hv = heads
    x = make_inputs(
        RAGGED, hq, hk, hv, 128, dtype=torch.bfloat16, device="cuda", seed=hq * 100 + hv, with_state=True
    )
    ref = reference(x, l2=False)
    o, state = run(x, backend)
    check(o, state, ref, f"{backend} {hq}/{hk}/{hv}")


@pytest.mark.timeout(1800)
@pytest.mark.parametrize("backend", BACKENDS)
def test_backend_with_l2norm_and_zero_state(backend: str) -> None:
    x = make_inputs(RAGGED, 16, 16, 32, 128, dtype=torch.bfloat16, device="cuda", seed=7, normalized=False)
    ref = reference(x, l2=True)
    o, state = run(x, backend, l2=True)
    check(o, state, ref, f"{backend} l2norm")


@pytest.mark.timeout(1800)
def test_backends_agree_on_a_qwen35_batch() -> None:
    """4 x 2048 tokens, GVA 16/32: each backend against the float64 run of the chunked algorithm."""
    from jitguard.gdn.backends.torch import chunk_gated_delta_rule as chunked

    x = make_inputs(
        (2048,) * 4, 16, 16, 32, 128, dtype=torch.bfloat16, device="cuda", seed=11, with_state=True
    )
    f64 = torch.float64
    ref = chunked(
        x.q.to(f64),
        x.k.to(f64),
        x.v.to(f64),
        x.g.to(f64),
        x.beta.to(f64),
        cu_seqlens=x.cu_seqlens,
        initial_state=x.initial_state,
    )
    for backend in BACKENDS:
        o, state = run(x, backend)
        check(o, state, ref, f"{backend} 4x2048")


def test_auto_prefers_flashinfer_and_falls_to_triton_for_inputs_flashinfer_cannot_take() -> None:
    from jitguard.gdn.dispatch import resolve

    assert resolve("auto", CallSpec("cuda", "bfloat16", 128, 16, 16, 32)).backend == "flashinfer"
    decision = resolve("auto", CallSpec("cuda", "bfloat16", 64, 16, 16, 32))
    assert decision.backend == "triton"
    skipped: Any = {e.backend: e for e in decision.trace}["flashinfer"]
    assert skipped.outcome == "skipped" and "D=64" in skipped.reason
    x = make_inputs((100, 3), 2, 2, 4, 64, dtype=torch.bfloat16, device="cuda", with_state=True)
    o, state = run(x, "auto")
    check(o, state, reference(x, l2=False), "auto D=64")


@pytest.mark.timeout(1800)
@pytest.mark.parametrize("backend", BACKENDS)
def test_backend_takes_strided_views(backend: str) -> None:
    """q/k/v split from one fused projection (as an engine holds them) and g/beta transposed from [H, T]."""
    x = make_inputs(RAGGED, 16, 16, 32, 128, dtype=torch.bfloat16, device="cuda", seed=5, with_state=True)
    qkv = torch.cat([x.q, x.k, x.v], dim=1)
    q, k, v = qkv.split([16, 16, 32], dim=1)
    g, beta = x.g.t().contiguous().t(), x.beta.t().contiguous().t()
    assert not (q.is_contiguous() or g.is_contiguous() or beta.is_contiguous())
    strided = GdnInputs(q, k, v, g, beta, x.cu_seqlens, x.initial_state)
    o, state = run(strided, backend)
    check(o, state, reference(x, l2=False), f"{backend} strided")
