"""The float64 recurrence is the documented definition (docs/gdn.md): checked against closed forms."""

from __future__ import annotations

import torch

from jitguard.gdn.reference import recurrent_gated_delta_rule
from jitguard.gdn.shapes import make_inputs


def test_one_token_from_zero_state_is_scaled_beta_v_times_k_dot_q() -> None:
    x = make_inputs([1], 1, 1, 1, 8, dtype=torch.float64, seed=1)
    o, state = recurrent_gated_delta_rule(x.q, x.k, x.v, x.g, x.beta, cu_seqlens=x.cu_seqlens, scale=0.5)
    b = x.beta[0, 0].double()
    expected_state = b * torch.outer(x.v[0, 0], x.k[0, 0])  # [V, K]
    torch.testing.assert_close(state[0, 0], expected_state)
    torch.testing.assert_close(o[0, 0], 0.5 * b * x.v[0, 0] * torch.dot(x.k[0, 0], x.q[0, 0]))


def test_with_beta_zero_the_state_only_decays_by_exp_of_summed_g() -> None:
    x = make_inputs([5], 1, 1, 1, 4, dtype=torch.float64, seed=2, with_state=True)
    zero_beta = torch.zeros_like(x.beta)
    o, state = recurrent_gated_delta_rule(
        x.q, x.k, x.v, x.g, zero_beta, cu_seqlens=x.cu_seqlens, initial_state=x.initial_state
    )
    assert x.initial_state is not None
    s0 = x.initial_state[0, 0].double()
    decay = x.g[:, 0].double().cumsum(0).exp()
    torch.testing.assert_close(state[0, 0], decay[-1] * s0)
    for t in range(5):
        torch.testing.assert_close(o[t, 0], 4**-0.5 * decay[t] * (s0 @ x.q[t, 0]))


def test_sequences_do_not_leak_state_into_each_other() -> None:
    x = make_inputs([3, 4], 1, 1, 1, 4, dtype=torch.float64, seed=3)
    o, _ = recurrent_gated_delta_rule(x.q, x.k, x.v, x.g, x.beta, cu_seqlens=x.cu_seqlens)
    alone, _ = recurrent_gated_delta_rule(
        x.q[3:], x.k[3:], x.v[3:], x.g[3:], x.beta[3:], cu_seqlens=torch.tensor([0, 4])
    )
    torch.testing.assert_close(o[3:], alone)
