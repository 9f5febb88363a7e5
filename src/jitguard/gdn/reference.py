"""The float64 token-by-token recurrence: the definition every backend is tested against.

Per sequence, per state head h (q head h // (H/Hq), k head h // (H/Hk), v head h // (H/Hv)), per token t,
with the state S as [V, K]:

    S <- exp(g_t) * S
    u  = beta_t * (v_t - S k_t)
    S <- S + u k_t^T
    o_t = scale * S q_t            (after the update)

Written from the math for clarity, not speed: use it on small inputs (tests, the CLI's error check).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from jitguard.gdn.convention import L2NORM_EPS

if TYPE_CHECKING:
    import torch


def expand_heads(x: torch.Tensor, num_heads: int) -> torch.Tensor:
    """[T, h, D] -> [T, num_heads, D] with state head j reading head j // (num_heads // h)."""
    h = x.shape[1]
    return x if h == num_heads else x.repeat_interleave(num_heads // h, dim=1)


def l2norm(x: torch.Tensor) -> torch.Tensor:
    """x / sqrt(sum(x^2) + eps) over the last dim, computed in at least float32, returned in x's dtype."""
    import torch

    work = x if x.dtype == torch.float64 else x.float()
    return (work * torch.rsqrt((work * work).sum(-1, keepdim=True) + L2NORM_EPS)).to(x.dtype)


def recurrent_gated_delta_rule(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    *,
    cu_seqlens: torch.Tensor,
    scale: float | None = None,
    initial_state: torch.Tensor | None = None,
    use_qk_l2norm: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Returns ``(o [T, H, D], final_state [N, H, V, K])``, both float64, in jitguard's convention."""
    import torch

    f64 = torch.float64
    H = max(q.shape[1], v.shape[1])
    D = q.shape[2]
    scale = D**-0.5 if scale is None else float(scale)
    q, k = q.to(f64), k.to(f64)
    if use_qk_l2norm:
        q, k = l2norm(q), l2norm(k)
    qh, kh, vh = expand_heads(q, H), expand_heads(k, H), expand_heads(v.to(f64), H)
    decay, b = g.to(f64).exp(), beta.to(f64)
    bounds = [int(x) for x in cu_seqlens.tolist()]
    n = len(bounds) - 1
    out = torch.zeros(q.shape[0], H, D, dtype=f64, device=q.device)
    states = torch.zeros(n, H, D, D, dtype=f64, device=q.device)
    with torch.no_grad():
        for i in range(n):
            S = initial_state[i].to(f64).clone() if initial_state is not None else states[i].clone()
            for t in range(bounds[i], bounds[i + 1]):
                S = S * decay[t][:, None, None]
                u = b[t][:, None] * (vh[t] - torch.einsum("hvk,hk->hv", S, kh[t]))
                S = S + u[:, :, None] * kh[t][:, None, :]
                out[t] = scale * torch.einsum("hvk,hk->hv", S, qh[t])
            states[i] = S
    return out, states
