"""jitguard's own proof of FlashInfer GDN prefill in the vLLM releases that make no warmup call (0.17.x).

vLLM 0.18 and later warm each GDN layer's prefill up in the profile run (``warmup``, watched as evidence);
0.17 does not: its ``Qwen3NextGatedDeltaNet._forward_core`` (``vllm/model_executor/models/qwen3_next.py``)
returns at once when the profile run calls it (no attention metadata), so FlashInfer's GDN prefill runs first
at the first request. jitguard's proof runs at that same point, the layer's first ``_forward_core`` call in the
profile run, before the engine reports ready: the layer knows its shapes in this process (q/k and value heads
after tensor parallelism, head dims, the activations' dtype from ``mixed_qkv``, the state's from
``get_state_dtype``), and its op (``ChunkGatedDeltaRule``) is called the way its own prefill path calls it, on
64 tokens, with q and k l2-normalised beforehand (``use_qk_l2norm_in_kernel=False``), so the call reaches
FlashInfer's ``chunk_gated_delta_rule`` and nothing else. The rest is ``integrations/proof.py``: the skip rule,
the record; a failure moves every GDN layer to Triton/FLA (``forward_native``; 0.17 has no option that names
FlashInfer, so its choice is always vLLM's own).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from types import ModuleType
from typing import TYPE_CHECKING, Any

from jitguard.boundary import patches
from jitguard.boundary.failsafe import shielded
from jitguard.decision.engine_verdicts import GDN_PREFILL
from jitguard.integrations.proof import TOKENS, Trial, prove
from jitguard.integrations.vllm import warmup

if TYPE_CHECKING:
    from jitguard.integrations.choices import ChoiceGuard

METHOD = "_forward_core"
WHERE = "the profile run's first GDN `_forward_core` (jitguard's proof call)"


def watch(module: ModuleType, guard: ChoiceGuard) -> bool:
    """Wrap ``_forward_core`` of every GDN layer class in ``module`` that has no warmup of its own (vLLM
    0.17); False where there is none."""
    found = False
    for value in list(module.__dict__.values()):
        if (
            isinstance(value, type)
            and value.__module__ == module.__name__
            and METHOD in value.__dict__
            and warmup.METHOD not in value.__dict__
            and callable(getattr(value, "get_state_dtype", None))
        ):
            found = patches.wrap(value, METHOD, lambda original: _proven(original, guard)) or found
    return found


def unwatch(module: ModuleType) -> None:
    for value in list(module.__dict__.values()):
        if isinstance(value, type) and METHOD in value.__dict__:
            patches.undo(value, METHOD)


def _proven(original: Callable[..., Any], guard: ChoiceGuard) -> Callable[..., Any]:
    @functools.wraps(original)
    def _forward_core(self: Any, mixed_qkv: Any, *args: Any, **kwargs: Any) -> Any:
        op: Any = getattr(self, "chunk_gated_delta_rule", None)
        if not warmup.on_flashinfer(op) or guard.is_proven(GDN_PREFILL) or _capturing():
            return original(self, mixed_qkv, *args, **kwargs)
        if guard.known_failed(GDN_PREFILL):  # an earlier layer's proof failed: this one moves without a call
            shielded(
                "moving a GDN layer to Triton/FLA",
                "vLLM's choice stands",
                lambda: warmup.to_triton(self, op),
                _no,
            )
            return original(self, mixed_qkv, *args, **kwargs)
        inputs = shielded(
            "the input of vLLM's GDN prefill proof",
            "vLLM's choice stands, unproven",
            lambda: tiny_inputs(self, mixed_qkv),
            _no,
        )
        if inputs is not None and not prove(guard, trial(), lambda: op._forward_method(**inputs)):
            shielded(
                "moving a GDN layer to Triton/FLA",
                "vLLM's choice stands",
                lambda: warmup.to_triton(self, op),
                _no,
            )
        return original(self, mixed_qkv, *args, **kwargs)

    return _forward_core


def _no() -> None:
    return None


def _capturing() -> bool:
    """Whether a CUDA graph is being captured: no proof there (the profile run, before any capture, has it)."""
    import torch

    try:
        return bool(torch.cuda.is_available() and torch.cuda.is_current_stream_capturing())
    except Exception:  # a torch without CUDA, or a query this build refuses: nothing is captured
        return False


def trial() -> Trial:
    """vLLM's GDN prefill as this process asked for it, proven by jitguard's call."""
    base = warmup.trial()
    return Trial(base.choice, WHERE, base.named, base.instead, base.moved)


def tiny_inputs(layer: Any, mixed_qkv: Any, tokens: int = TOKENS) -> dict[str, Any]:
    """The arguments vLLM's prefill path passes its GDN op (FLA's convention: ``[1, T, H, D]``, log-space
    ``g``, a ``[1, Hv, V, K]`` initial state of the layer's state dtype, int64 ``cu_seqlens``), for one
    sequence of ``tokens`` tokens of ``layer``'s shapes in this process."""
    import torch

    device, dtype = mixed_qkv.device, mixed_qkv.dtype
    qk_heads = layer.num_k_heads // layer.tp_size
    v_heads = layer.num_v_heads // layer.tp_size
    _, state_dtype = layer.get_state_dtype()
    generator = torch.Generator(device="cpu").manual_seed(0)

    def unit(heads: int, dim: int) -> Any:
        x = torch.randn(1, tokens, heads, dim, generator=generator)
        return torch.nn.functional.normalize(x, dim=-1).to(device=device, dtype=dtype)

    return {
        "q": unit(qk_heads, layer.head_k_dim),
        "k": unit(qk_heads, layer.head_k_dim),
        "v": unit(v_heads, layer.head_v_dim),
        "g": torch.full((1, tokens, v_heads), -0.1, device=device, dtype=dtype),
        "beta": torch.full((1, tokens, v_heads), 0.5, device=device, dtype=dtype),
        "initial_state": torch.zeros(
            1, v_heads, layer.head_v_dim, layer.head_k_dim, device=device, dtype=state_dtype
        ),
        "output_final_state": True,
        "cu_seqlens": torch.tensor([0, tokens], device=device, dtype=torch.long),
        "use_qk_l2norm_in_kernel": False,
    }
