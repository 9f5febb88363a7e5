"""Built-in call shapes (Qwen3.5 / Qwen3-Next GDN layers) and a random input maker, shared by the CLI
(`jitguard gdn run`), the tests and the benchmark."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from jitguard.gdn.api import chunk_gated_delta_rule

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True)
class Shape:
    """A batch of sequences for one GDN layer."""

    name: str
    lengths: tuple[int, ...]
    num_q_heads: int
    num_k_heads: int
    num_v_heads: int
    head_dim: int
    description: str

    @property
    def total_tokens(self) -> int:
        return sum(self.lengths)

    @property
    def num_heads(self) -> int:
        return max(self.num_q_heads, self.num_v_heads)


SHAPES: dict[str, Shape] = {
    s.name: s
    for s in (
        Shape("small", (64, 17, 1), 2, 2, 4, 128, "3 ragged sequences (64, 17, 1), GVA 2/4 heads, D=128"),
        Shape(
            "qwen3.5", (2048,) * 4, 16, 16, 32, 128, "Qwen3.5 / Qwen3-Next layer at TP1: 4 x 2048, GVA 16/32"
        ),
        Shape("qwen3.5-long", (8192,), 16, 16, 32, 128, "Qwen3.5 layer, one 8192-token prompt, GVA 16/32"),
        Shape("qwen3.5-tp8", (2048,) * 4, 2, 2, 8, 128, "Qwen3.5 layer per rank at TP8: 4 x 2048, GVA 2/8"),
        Shape("gqa", (512, 300), 8, 4, 4, 128, "GQA layout (Hq = 2 Hk, Hk = Hv), 2 sequences"),
    )
}


@dataclass(frozen=True)
class GdnInputs:
    """One call's tensors in jitguard's convention."""

    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    g: torch.Tensor
    beta: torch.Tensor
    cu_seqlens: torch.Tensor
    initial_state: torch.Tensor | None

    def run(self, *, backend: str = "auto", use_qk_l2norm: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
        """The public op on these inputs, final state returned."""
        o, state = chunk_gated_delta_rule(
            self.q,
            self.k,
            self.v,
            self.g,
            self.beta,
            cu_seqlens=self.cu_seqlens,
            initial_state=self.initial_state,
            output_final_state=True,
            use_qk_l2norm=use_qk_l2norm,
            backend=backend,
        )
        assert state is not None  # output_final_state=True
        return o, state


def make_inputs(
    lengths: tuple[int, ...] | list[int],
    num_q_heads: int,
    num_k_heads: int,
    num_v_heads: int,
    head_dim: int,
    *,
    dtype: torch.dtype | None = None,
    device: str | torch.device = "cpu",
    seed: int = 0,
    with_state: bool = False,
    normalized: bool = True,
) -> GdnInputs:
    """Random inputs shaped like a real layer's: g = -softplus(x - 2) (decays near 1, as trained models
    have), beta = sigmoid(x). ``normalized`` l2-normalises q and k, as Qwen3.5 does, which keeps the delta
    rule stable (pass ``use_qk_l2norm=True`` to the op instead when ``normalized=False``)."""
    import torch
    import torch.nn.functional as F

    dtype = dtype or torch.bfloat16
    gen = torch.Generator().manual_seed(seed)
    T, H, D = sum(lengths), max(num_q_heads, num_v_heads), head_dim

    def randn(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=gen, dtype=torch.float32)

    q, k = randn(T, num_q_heads, D), randn(T, num_k_heads, D)
    if normalized:
        q, k = F.normalize(q, dim=-1), F.normalize(k, dim=-1)
    v = randn(T, num_v_heads, D)
    g = -F.softplus(randn(T, H) - 2.0)
    beta = torch.sigmoid(randn(T, H))
    bounds = [0]
    for n in lengths:
        bounds.append(bounds[-1] + n)
    state = 0.5 * randn(len(lengths), H, D, D) if with_state else None
    return GdnInputs(
        q=q.to(dtype).to(device),
        k=k.to(dtype).to(device),
        v=v.to(dtype).to(device),
        g=g.to(device),
        beta=beta.to(device),
        cu_seqlens=torch.tensor(bounds, dtype=torch.int32).to(device),
        initial_state=None if state is None else state.to(device),
    )


def inputs_for(shape: Shape, **kwargs: object) -> GdnInputs:
    return make_inputs(
        shape.lengths,
        shape.num_q_heads,
        shape.num_k_heads,
        shape.num_v_heads,
        shape.head_dim,
        **kwargs,  # type: ignore[arg-type]
    )
