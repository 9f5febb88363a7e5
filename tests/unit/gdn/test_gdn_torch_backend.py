"""The torch backend (our chunked implementation) against the float64 token-by-token recurrence, through the
public op. Tolerances: float32 within 1e-5 relative; bf16 within FlashInfer's own test tolerances."""

from __future__ import annotations

import pytest
import torch

from jitguard.gdn import chunk_gated_delta_rule
from jitguard.gdn.reference import recurrent_gated_delta_rule
from jitguard.gdn.shapes import GdnInputs, make_inputs


def rel_err(a: torch.Tensor, ref: torch.Tensor) -> float:
    return float((a.double() - ref).abs().max() / ref.abs().max())


def run_both(
    x: GdnInputs, *, l2: bool = False
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    o, state = x.run(backend="torch", use_qk_l2norm=l2)
    ro, rstate = recurrent_gated_delta_rule(
        x.q, x.k, x.v, x.g, x.beta, cu_seqlens=x.cu_seqlens, initial_state=x.initial_state, use_qk_l2norm=l2
    )
    assert state is not None
    return o, state, ro, rstate


# (lengths, Hq, Hk, Hv): chunk edges (63/64/65/129), length-1 and empty sequences, MHA, GVA, GQA.
CASES = [
    pytest.param((129, 1, 64, 63, 65), 2, 2, 4, id="gva-ragged-chunk-edges"),
    pytest.param((70, 1, 0, 33), 2, 2, 2, id="mha-with-empty-and-length-1"),
    pytest.param((90, 40), 4, 2, 2, id="gqa"),
    pytest.param((1,), 1, 1, 4, id="single-token"),
]


@pytest.mark.parametrize(("lengths", "hq", "hk", "hv"), CASES)
def test_float32_matches_the_float64_recurrence_within_1e_5(
    lengths: tuple[int, ...], hq: int, hk: int, hv: int
):
    x = make_inputs(lengths, hq, hk, hv, 32, dtype=torch.float32, seed=sum(lengths), with_state=True)
    o, state, ro, rstate = run_both(x)
    assert o.dtype == torch.float32 and o.shape == (sum(lengths), max(hq, hv), 32)
    assert state.dtype == torch.float32 and state.shape == (len(lengths), max(hq, hv), 32, 32)
    assert rel_err(o, ro) < 1e-5
    assert rel_err(state, rstate) < 1e-5


def test_bfloat16_matches_within_flashinfer_tolerances() -> None:
    x = make_inputs((100, 1, 37), 2, 2, 4, 64, dtype=torch.bfloat16, seed=7, with_state=True)
    o, state, ro, rstate = run_both(x)
    assert o.dtype == torch.bfloat16
    torch.testing.assert_close(o.double(), ro, atol=1e-2, rtol=1e-2)  # FlashInfer: bf16 out 1e-2/1e-2
    torch.testing.assert_close(state.double(), rstate, atol=5e-3, rtol=1e-3)  # FlashInfer: state 5e-3/1e-3


def test_float64_inputs_are_computed_in_float64_and_the_state_is_still_float32() -> None:
    x = make_inputs((80, 5), 1, 1, 2, 16, dtype=torch.float64, seed=3, with_state=True)
    o, state, ro, rstate = run_both(x)
    assert o.dtype == torch.float64 and state.dtype == torch.float32
    assert rel_err(o, ro) < 1e-12 and rel_err(state, rstate) < 1e-7


def test_l2norm_option_normalises_q_and_k_first() -> None:
    raw = make_inputs((50, 20), 2, 2, 4, 32, dtype=torch.float32, seed=4, normalized=False)
    o, _, ro, _ = run_both(raw, l2=True)
    assert rel_err(o, ro) < 1e-5
    normed = GdnInputs(
        torch.nn.functional.normalize(raw.q, dim=-1),
        torch.nn.functional.normalize(raw.k, dim=-1),
        raw.v,
        raw.g,
        raw.beta,
        raw.cu_seqlens,
        None,
    )
    o_pre, _ = chunk_gated_delta_rule(
        normed.q, normed.k, normed.v, normed.g, normed.beta, cu_seqlens=normed.cu_seqlens, backend="torch"
    )
    torch.testing.assert_close(o, o_pre, atol=1e-5, rtol=1e-4)


def test_final_state_carries_a_sequence_across_two_calls() -> None:
    x = make_inputs((96,), 2, 2, 4, 32, dtype=torch.float32, seed=5)
    whole, whole_state = chunk_gated_delta_rule(
        x.q, x.k, x.v, x.g, x.beta, cu_seqlens=x.cu_seqlens, output_final_state=True, backend="torch"
    )
    cut = torch.tensor([0, 40])
    first, mid = chunk_gated_delta_rule(
        x.q[:40],
        x.k[:40],
        x.v[:40],
        x.g[:40],
        x.beta[:40],
        cu_seqlens=cut,
        output_final_state=True,
        backend="torch",
    )
    second, end = chunk_gated_delta_rule(
        x.q[40:],
        x.k[40:],
        x.v[40:],
        x.g[40:],
        x.beta[40:],
        cu_seqlens=torch.tensor([0, 56]),
        initial_state=mid,
        output_final_state=True,
        backend="torch",
    )
    torch.testing.assert_close(torch.cat([first, second]), whole, atol=1e-5, rtol=1e-5)
    assert whole_state is not None and end is not None
    torch.testing.assert_close(end, whole_state, atol=1e-5, rtol=1e-5)


def test_final_state_is_none_unless_asked() -> None:
    x = make_inputs((10,), 1, 1, 1, 8, dtype=torch.float32)
    _, state = chunk_gated_delta_rule(x.q, x.k, x.v, x.g, x.beta, cu_seqlens=x.cu_seqlens, backend="torch")
    assert state is None


def single_head(x: GdnInputs, qh: int, kh: int, vh: int, sh: int) -> torch.Tensor:
    o, _ = chunk_gated_delta_rule(
        x.q[:, qh : qh + 1].contiguous(),
        x.k[:, kh : kh + 1].contiguous(),
        x.v[:, vh : vh + 1].contiguous(),
        x.g[:, sh : sh + 1].contiguous(),
        x.beta[:, sh : sh + 1].contiguous(),
        cu_seqlens=x.cu_seqlens,
        backend="torch",
    )
    return o[:, 0]


def test_gva_value_head_j_reads_qk_head_j_div_ratio() -> None:
    x = make_inputs((40, 9), 2, 2, 6, 16, dtype=torch.float32, seed=8)  # ratio 3
    o, _ = chunk_gated_delta_rule(x.q, x.k, x.v, x.g, x.beta, cu_seqlens=x.cu_seqlens, backend="torch")
    for j in range(6):
        torch.testing.assert_close(o[:, j], single_head(x, j // 3, j // 3, j, j), atol=1e-6, rtol=1e-5)


def test_gqa_query_head_h_reads_kv_head_h_div_ratio() -> None:
    x = make_inputs((40, 9), 4, 2, 2, 16, dtype=torch.float32, seed=9)  # ratio 2, state heads = q heads
    o, _ = chunk_gated_delta_rule(x.q, x.k, x.v, x.g, x.beta, cu_seqlens=x.cu_seqlens, backend="torch")
    assert o.shape[1] == 4
    for h in range(4):
        torch.testing.assert_close(o[:, h], single_head(x, h, h // 2, h // 2, h), atol=1e-6, rtol=1e-5)


def test_a_qwen35_sized_call_runs_on_cpu() -> None:
    x = make_inputs((1024, 512), 16, 16, 32, 128, dtype=torch.bfloat16, seed=10)
    o, _ = chunk_gated_delta_rule(x.q, x.k, x.v, x.g, x.beta, cu_seqlens=x.cu_seqlens, backend="torch")
    assert o.shape == (1536, 32, 128) and bool(torch.isfinite(o).all())
