"""The PyTorch backend: our own chunked gated delta rule, written from the math. Runs anywhere torch runs.

Within a chunk of C tokens (local cumulative log-decay gamma_r = g_1 + ... + g_r), with M = S^T the [K, V]
state at the chunk start, the recurrence unrolls to

    U   = W_v - W_k M,          (I + A) [W_v | W_k] = [beta * V | beta * exp(gamma) * K],
                                A[r, s] = beta_r exp(gamma_r - gamma_s) (k_r . k_s) for s < r
    O   = scale * ((exp(gamma) * Q) M + (Q K^T * Lambda) U),   Lambda[r, s] = exp(gamma_r - gamma_s), s <= r
    M'  = exp(gamma_C) M + (exp(gamma_C - gamma) * K)^T U

Everything except the three matmuls with M is independent of the state and computed for all chunks at once
(one batched triangular solve); only the state is carried chunk by chunk. Sequences are sorted by their
number of chunks so that the sequences still running at step j are a prefix: every step works on views, no
gathers. Computes in float32 (float64 for float64 inputs); inference only (no autograd graph).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from jitguard.decision.gdn_resolution import CallSpec
from jitguard.findings.model import Finding
from jitguard.gdn.call import GdnCall
from jitguard.gdn.convention import DEFAULT_CHUNK
from jitguard.gdn.reference import expand_heads, l2norm

if TYPE_CHECKING:
    import torch

NAME = "torch"
TITLE = "PyTorch GDN prefill (jitguard's own chunked implementation)"
MODULE: str | None = None  # nothing to build or load: never cached as failed


def input_findings(spec: CallSpec) -> list[Finding]:
    """The torch backend takes every input the convention allows."""
    return []


def load() -> None:
    import torch  # noqa: F401  (the only thing this backend needs)


def run(call: GdnCall) -> tuple[torch.Tensor, torch.Tensor | None]:
    """One validated call in jitguard's convention; ``(o, final_state or None)``."""
    o, state = chunk_gated_delta_rule(
        call.q,
        call.k,
        call.v,
        call.g,
        call.beta,
        cu_seqlens=call.cu_seqlens,
        scale=call.scale,
        initial_state=call.initial_state,
        use_qk_l2norm=call.use_qk_l2norm,
    )
    return o, (state if call.output_final_state else None)


def chunk_gated_delta_rule(
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
    chunk_size: int = DEFAULT_CHUNK,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Returns ``(o [T, H, D] in q's dtype, final_state [N, H, V, K] float32)``; inputs are not validated."""
    import torch

    with torch.no_grad():
        return _chunked(q, k, v, g, beta, cu_seqlens, scale, initial_state, use_qk_l2norm, chunk_size)


def _chunked(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    cu_seqlens: torch.Tensor,
    scale: float | None,
    initial_state: torch.Tensor | None,
    use_qk_l2norm: bool,
    C: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    import torch

    device, out_dtype = q.device, q.dtype
    work = torch.float64 if q.dtype == torch.float64 else torch.float32
    T, _, D = q.shape
    H = max(q.shape[1], v.shape[1])
    scale = D**-0.5 if scale is None else float(scale)
    if use_qk_l2norm:
        q, k = l2norm(q), l2norm(k)
    q, k, v = (expand_heads(x, H).to(work) for x in (q, k, v))
    g, beta = g.to(work), beta.to(work)

    bounds = [int(x) for x in cu_seqlens.tolist()]
    N = len(bounds) - 1
    lengths = [bounds[i + 1] - bounds[i] for i in range(N)]
    counts = [-(-n // C) for n in lengths]
    # Longest sequences first: at chunk step j the running sequences are order[:active[j]].
    order = sorted(range(N), key=lambda i: -counts[i])
    steps = counts[order[0]] if N else 0
    active = [sum(1 for i in order if counts[i] > j) for j in range(steps)]
    starts: list[int] = []  # token offset of each chunk, chunks laid out step-major
    for j in range(steps):
        starts.extend(bounds[order[r]] + j * C for r in range(active[j]))
    ends_at = [bounds[order[r] + 1] for j in range(steps) for r in range(active[j])]

    state = torch.zeros(N, H, D, D, dtype=work, device=device)  # [K, V] per head, sorted order
    if initial_state is not None:
        state.copy_(initial_state[order].transpose(-1, -2))
    out = torch.empty(T, H, D, dtype=out_dtype, device=device)
    if not starts:
        return out, _unsort(state, order).transpose(-1, -2).float().contiguous()

    pos = torch.arange(C, device=device)
    tok = torch.tensor(starts, device=device)[:, None] + pos  # [Nc, C]
    valid = tok < torch.tensor(ends_at, device=device)[:, None]
    tok = torch.where(valid, tok, 0)
    vmask = valid.to(work)

    def chunks(x: torch.Tensor) -> torch.Tensor:  # [T, H, ...] -> [Nc, H, C, ...], padding zeroed
        y = x[tok] * vmask.view(*vmask.shape, *([1] * (x.dim() - 1)))
        return y.transpose(1, 2) if x.dim() == 2 else y.permute(0, 2, 1, 3)

    qc, kc, vc = chunks(q), chunks(k), chunks(v)
    gc, bc = chunks(g), chunks(beta)  # [Nc, H, C]; padded tokens: g = 0 (no decay), beta = 0 (no update)
    gamma = gc.cumsum(-1)
    incl = torch.ones(C, C, dtype=torch.bool, device=device).tril()
    diff = (gamma[..., :, None] - gamma[..., None, :]).masked_fill(~incl, float("-inf"))
    lam = diff.exp()  # Lambda, zero above the diagonal
    kk = kc @ kc.transpose(-1, -2)
    a = (bc[..., :, None] * lam * kk).tril(-1)
    a.diagonal(dim1=-2, dim2=-1).add_(1.0)  # I + A, unit lower triangular
    rhs = torch.cat([bc[..., None] * vc, (bc * gamma.exp())[..., None] * kc], dim=-1)
    w = torch.linalg.solve_triangular(a, rhs, upper=False, unitriangular=True)
    w_v, w_k = w[..., :D], w[..., D:]
    p = (qc @ kc.transpose(-1, -2)) * lam
    q_dec = gamma.exp()[..., None] * qc
    g_last = gamma[..., -1]
    k_dec = (g_last[..., None] - gamma).exp()[..., None] * kc
    s_dec = g_last.exp()[..., None, None]
    del diff, lam, kk, a, rhs, w, qc, vc, kc, gc, bc

    o_chunks = torch.empty_like(w_v)
    offset = 0
    for j in range(steps):
        n = active[j]
        sl = slice(offset, offset + n)
        m0 = state[:n]
        u = w_v[sl] - w_k[sl] @ m0
        o_chunks[sl] = scale * (q_dec[sl] @ m0 + p[sl] @ u)
        state[:n] = s_dec[sl] * m0 + k_dec[sl].transpose(-1, -2) @ u
        offset += n

    flat = o_chunks.permute(0, 2, 1, 3)[valid]  # [real tokens, H, D] in chunk order
    out[tok[valid]] = flat.to(out.dtype)
    return out, _unsort(state, order).transpose(-1, -2).float().contiguous()


def _unsort(state: torch.Tensor, order: list[int]) -> torch.Tensor:
    import torch

    inverse = torch.empty(len(order), dtype=torch.long)
    inverse[torch.tensor(order, dtype=torch.long)] = torch.arange(len(order))
    return state[inverse.to(state.device)]
