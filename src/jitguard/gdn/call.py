"""One validated GDN prefill call in jitguard's convention (docs/gdn.md), carried to every backend.

Frozen, so a backend cannot change what the next backend in a fallback sees."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class GdnCall:
    """The inputs of ``jitguard.gdn.chunk_gated_delta_rule`` (tensors typed Any: no torch import here).

    ``scale`` is resolved: the caller's value, or D ** -0.5 when none was given."""

    q: Any  # [T, Hq, D]
    k: Any  # [T, Hk, D]
    v: Any  # [T, Hv, D]
    g: Any  # [T, H] natural-log per-step decay
    beta: Any  # [T, H] post-sigmoid
    cu_seqlens: Any  # [N + 1] int32/int64
    scale: float
    initial_state: Any = None  # [N, H, V, K] float32
    output_final_state: bool = False
    use_qk_l2norm: bool = False
