"""``jitguard.gdn.chunk_gated_delta_rule``: the public GDN prefill op (convention in docs/gdn.md)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from jitguard.gdn import dispatch
from jitguard.gdn.call import GdnCall
from jitguard.gdn.validate import check_backend_name, check_call

if TYPE_CHECKING:
    import torch


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
    output_final_state: bool = False,
    use_qk_l2norm: bool = False,
    backend: str = "auto",
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Gated DeltaNet chunked prefill over packed variable-length sequences (inference only).

    Args:
        q: [T, Hq, D]; k: [T, Hk, D]; v: [T, Hv, D]; one floating dtype, one device. Heads: Hq == Hk with Hv a
            multiple (GVA; Qwen3.5 16/16/32) or Hk == Hv with Hq a multiple (GQA). H = max(Hq, Hv).
        g: [T, H] natural-log per-step decay (FLA convention, e.g. ``-exp(A_log) * softplus(a + dt_bias)``).
        beta: [T, H] post-sigmoid.
        cu_seqlens: int32/int64 [N + 1] sequence boundaries (0 first, T last), on the CPU or q's device.
        scale: defaults to D ** -0.5.
        initial_state: [N, H, V, K] float32 (value-major, FlashInfer/vLLM layout) or None (zeros).
        output_final_state: also return the final state, [N, H, V, K] float32.
        use_qk_l2norm: l2-normalise q and k over D first (done by jitguard for every backend).
        backend: 'auto' (flashinfer -> triton -> torch, or JITGUARD_GDN_BACKEND when set) or a name (strict).

    Returns:
        ``(o, final_state)``: o is [T, H, D] in q's dtype; final_state is None unless requested.

    Raises:
        GdnInputError (a UsageError and a ValueError): bad input, with what to do.
        BackendUnavailable: a named backend cannot run here; carries the findings.
    """
    key = check_call(q, k, v, g, beta, cu_seqlens, scale, initial_state)
    if backend != "auto":
        backend = check_backend_name(backend)
    call = GdnCall(
        q,
        k,
        v,
        g,
        beta,
        cu_seqlens,
        key[2] ** -0.5 if scale is None else float(scale),
        initial_state,
        bool(output_final_state),
        bool(use_qk_l2norm),
    )
    return dispatch.dispatcher().call(backend, key, call)
