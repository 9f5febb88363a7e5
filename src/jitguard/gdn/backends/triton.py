"""The Triton backend: flash-linear-attention's ``fla.ops.gated_delta_rule.chunk_gated_delta_rule``
(fla-core).

Conversions from jitguard's convention: packed [T, H, D] -> batched [1, T, H, D] with int64 ``cu_seqlens``
on the device (plus the host copy when the caller gave one, which saves FLA a synchronisation); g stays
log-space; state [N, H, V, K] via ``state_v_first=True``; l2-norm by FLA's own flag (honoured). FLA
supports GVA natively (q and k share heads); for GQA jitguard repeats k and v to the q heads first.

FLA >= 0.6 silently routes to the ``flash_qla`` package when it is installed. jitguard's ``triton`` backend
means FLA's Triton kernels, so ``load()`` sets ``FLA_FLASH_QLA=0`` unless the user set that variable
themselves.
"""

from __future__ import annotations

import importlib
import os
from typing import TYPE_CHECKING, Any

from jitguard.decision.gdn_resolution import CallSpec
from jitguard.findings.catalog import make
from jitguard.findings.model import Finding
from jitguard.gdn.call import GdnCall
from jitguard.gdn.reference import expand_heads

if TYPE_CHECKING:
    import torch

NAME = "triton"
TITLE = "FLA Triton GDN prefill"
MODULE: str | None = "gdn-prefill/triton"
DTYPES = ("float16", "bfloat16", "float32")
MAX_HEAD_DIM = 256

_kernel: Any = None


def input_findings(spec: CallSpec) -> list[Finding]:
    reasons = []
    if spec.device_type != "cuda":
        reasons.append(f"the inputs are on {spec.device_type}; FLA's Triton kernels run on CUDA tensors only")
    if spec.dtype not in DTYPES:
        reasons.append(f"q/k/v are {spec.dtype}; FLA's kernels take float16, bfloat16 or float32")
    if spec.head_dim > MAX_HEAD_DIM:
        reasons.append(f"the head size is D={spec.head_dim}; FLA's chunked kernels take D <= {MAX_HEAD_DIM}")
    if not reasons:
        return []
    return [
        make(
            "gdn-input-unsupported",
            backend=NAME,
            evidence=[spec.describe()],
            title=TITLE,
            reason="; ".join(reasons) + ".",
            alternative="torch",
        )
    ]


def load() -> None:
    global _kernel
    if _kernel is not None:
        return
    os.environ.setdefault("FLA_FLASH_QLA", "0")
    _kernel = importlib.import_module("fla.ops.gated_delta_rule").chunk_gated_delta_rule


def run(call: GdnCall) -> tuple[torch.Tensor, torch.Tensor | None]:
    """One validated call in jitguard's convention; ``(o, final_state or None)``."""
    import torch

    q, k, v, cu_seqlens = call.q, call.k, call.v, call.cu_seqlens
    hq, hv = q.shape[1], v.shape[1]
    if hq > hv:  # GQA: FLA wants q and k to share heads
        k, v = expand_heads(k, hq), expand_heads(v, hq)
    host_cu = cu_seqlens.long() if cu_seqlens.device.type == "cpu" else None
    cu = cu_seqlens.to(device=q.device, dtype=torch.int64, non_blocking=True)
    o, state = _kernel(
        q.unsqueeze(0),
        k.unsqueeze(0),
        v.unsqueeze(0),
        call.g.float().unsqueeze(0),
        call.beta.unsqueeze(0),
        scale=call.scale,
        initial_state=call.initial_state,
        output_final_state=call.output_final_state,
        use_qk_l2norm_in_kernel=call.use_qk_l2norm,
        state_v_first=True,
        cu_seqlens=cu,
        cu_seqlens_cpu=host_cu,
    )
    return o.squeeze(0), (state if call.output_final_state else None)
