"""The one calling convention of jitguard's GDN prefill op, and the head mapping every backend follows.

Heads (see docs/gdn.md): q has ``Hq`` heads, k ``Hk``, v ``Hv``; the op computes ``H = max(Hq, Hv)``
independent recurrences ("state heads", FlashInfer's ``num_sab_heads``). State head ``h`` reads q head
``h // (H // Hq)``, k head ``h // (H // Hk)`` and v head ``h // (H // Hv)``. Allowed layouts:

- ``mha``: Hq == Hk == Hv;
- ``gva``: Hq == Hk, Hv = r * Hq (Qwen3.5 / Qwen3-Next: 16 q/k heads, 32 v heads);
- ``gqa``: Hk == Hv, Hq = r * Hk.

This module is pure Python (no torch) so resolution and the CLI can use it without importing torch.
"""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_CHUNK = 64
# FLA's l2norm epsilon (fla.modules.l2norm); jitguard normalises with the same formula for every backend.
L2NORM_EPS = 1e-6
FLOAT_DTYPES = ("float16", "bfloat16", "float32", "float64")


def head_layout(num_q_heads: int, num_k_heads: int, num_v_heads: int) -> str | None:
    """'mha', 'gva' or 'gqa'; None when the head counts fit none of them."""
    if min(num_q_heads, num_k_heads, num_v_heads) <= 0:
        return None
    if num_q_heads == num_k_heads == num_v_heads:
        return "mha"
    if num_q_heads == num_k_heads and num_v_heads % num_q_heads == 0:
        return "gva"
    if num_k_heads == num_v_heads and num_q_heads % num_k_heads == 0:
        return "gqa"
    return None


@dataclass(frozen=True)
class CallSpec:
    """What resolution needs to know about one call: no tensors, only their type-level facts."""

    device_type: str = "cuda"
    dtype: str = "bfloat16"
    head_dim: int = 128
    num_q_heads: int = 16
    num_k_heads: int = 16
    num_v_heads: int = 32

    @property
    def num_heads(self) -> int:
        """State/output heads: max(Hq, Hv)."""
        return max(self.num_q_heads, self.num_v_heads)

    @property
    def layout(self) -> str | None:
        return head_layout(self.num_q_heads, self.num_k_heads, self.num_v_heads)

    def describe(self) -> str:
        return (
            f"{self.device_type} {self.dtype}, D={self.head_dim}, heads q/k/v="
            f"{self.num_q_heads}/{self.num_k_heads}/{self.num_v_heads} ({self.layout})"
        )


# The Qwen3.5 / Qwen3-Next linear-attention layer at TP1: what `explain()` resolves when no call was made.
QWEN35_SPEC = CallSpec()
