"""SGLang's GDN prefill on FlashInfer, proven in the scheduler before the engine serves.

SGLang first calls FlashInfer's GDN prefill at the first request, so jitguard calls it once itself where each
model runner sets up its GDN attention backend (``GDNAttnBackend.__init__``): the kernel SGLang will call, with
the arguments its ``extend`` passes, on 64 tokens of the model's shapes (``integrations/proof.py``). When it
raises, ``auto`` moves this backend's prefill to SGLang's Triton kernel, a named FlashInfer stops the scheduler,
and the failure is recorded by fingerprint (docs/sglang.md).
"""

from __future__ import annotations

import functools
import importlib
import logging
from types import ModuleType
from typing import TYPE_CHECKING, Any

from jitguard.boundary import patches
from jitguard.boundary.failsafe import shielded
from jitguard.decision.sglang_phases import (
    FLASHINFER,
    PHASE_CHOICES,
    TRITON,
    flag,
    instead,
    named_by,
    option,
    request_of,
)
from jitguard.integrations.proof import PrefillShapes, Trial, prove, tiny_prefill_inputs

if TYPE_CHECKING:
    from jitguard.integrations.choices import ChoiceGuard

log = logging.getLogger("jitguard.sglang")

MODULE = "sglang.srt.layers.attention.linear.gdn_backend"
CLASS = "GDNAttnBackend"
TRITON_KERNEL = "sglang.srt.layers.attention.linear.kernels.gdn_triton"
WHERE = "`GDNAttnBackend.__init__`, as each model runner sets up its GDN attention backend"
MOVED = "jitguard moved SGLang's GDN prefill to Triton before the engine serves."
PREFILL = PHASE_CHOICES["prefill"]


def watch(module: ModuleType, guard: ChoiceGuard) -> bool:
    """Wrap ``GDNAttnBackend.__init__`` in SGLang's GDN backend module; False where it has none."""
    cls = module.__dict__.get(CLASS)
    if not isinstance(cls, type):
        return False
    return patches.wrap(cls, "__init__", lambda original: _proven(original, guard))


def unwatch(module: ModuleType) -> None:
    cls = module.__dict__.get(CLASS)
    if isinstance(cls, type):
        patches.undo(cls, "__init__")


def _proven(original: Any, guard: ChoiceGuard) -> Any:
    @functools.wraps(original)
    def __init__(self: Any, model_runner: Any, *args: Any, **kwargs: Any) -> None:
        original(self, model_runner, *args, **kwargs)
        dispatcher = getattr(self, "kernel_dispatcher", None)
        kernel = getattr(dispatcher, "extend_kernel", None)
        prefill = getattr(kernel, "_prefill_fn", None)
        if not callable(prefill):
            return  # prefill is not on FlashInfer here: nothing to prove
        trial = shielded(
            "SGLang's GDN prefill proof", "SGLang's choice stands", lambda: _trial(model_runner), _no
        )
        inputs = shielded(
            "the input of SGLang's GDN prefill proof",
            "SGLang's choice stands, unproven",
            lambda: tiny_prefill_inputs(shapes(self, model_runner, kernel)),
            _no,
        )
        if trial is None or inputs is None:
            return
        if not prove(guard, trial, lambda: prefill(**inputs)):
            shielded(
                "moving SGLang's GDN prefill to Triton",
                "SGLang's choice stands",
                lambda: to_triton(self, model_runner, dispatcher, kernel),
                _no,
            )

    return __init__


def _no() -> None:
    return None


def _trial(model_runner: Any) -> Trial:
    """SGLang's prefill choice as the operator asked for it (from the runner's ServerArgs)."""
    request = request_of(getattr(model_runner, "server_args", None))
    named = named_by("prefill", request)
    how = f"{named} {FLASHINFER}" if named else None
    return Trial(PREFILL, WHERE, how, instead("prefill", named or flag(option("prefill"))), MOVED)


def shapes(backend: Any, model_runner: Any, kernel: Any) -> PrefillShapes:
    """This process's GDN prefill shapes, from the runner's state pool: the temporal state is ``[layers, slots,
    Hv, V, K]``; the conv state's channels are ``2 * Hqk * K + Hv * V`` (q, k and v, after tensor
    parallelism). The activations' dtype is the model's; the state is float32 unless the kernel passes the
    pool's own dtype (its state-pool path, SM100)."""
    import torch

    cache = model_runner.req_to_token_pool.mamba_pool.mamba_cache
    temporal = cache.temporal
    v_heads, v_dim, k_dim = (int(n) for n in temporal.shape[-3:])
    conv_shape = getattr(backend, "conv_states_shape", None) or cache.conv[0].shape
    channels = int(conv_shape[-2])
    qk_heads, remainder = divmod(channels - v_heads * v_dim, 2 * k_dim)
    if remainder or qk_heads < 1:
        raise ValueError(f"conv state of {channels} channels does not fit {v_heads} value heads of {v_dim}")
    dtype = getattr(getattr(model_runner, "model_config", None), "dtype", None)
    if not isinstance(dtype, torch.dtype):
        dtype = cache.conv[0].dtype
    pool_state = getattr(kernel, "use_state_pool", False) and not getattr(
        kernel, "_prefill_needs_fp32_state", False
    )
    state_dtype = temporal.dtype if pool_state else torch.float32
    return PrefillShapes(qk_heads, v_heads, k_dim, v_dim, dtype, state_dtype, temporal.device)


def to_triton(backend: Any, model_runner: Any, dispatcher: Any, flashinfer: Any) -> None:
    """This backend's prefill on SGLang's Triton kernel from now on (and its verify, where that was FlashInfer
    only because prefill was)."""
    triton = getattr(dispatcher, "tree_verify_kernel", None)
    if triton is None or triton is flashinfer:
        triton = importlib.import_module(TRITON_KERNEL).TritonGDNKernel()
    dispatcher.extend_kernel = triton
    if (
        getattr(dispatcher, "verify_kernel", None) is flashinfer
        and dispatcher.decode_kernel is not flashinfer
    ):
        dispatcher.verify_kernel = triton
        dispatcher.verify_kernel_is_flashinfer = False
    for owner in (backend, model_runner):
        backends = getattr(owner, "linear_attn_backends", None)
        prefill = getattr(backends, "prefill", None)
        if prefill is not None and getattr(prefill, "value", None) == FLASHINFER:
            import msgspec  # SGLang's LinearAttnBackends is a frozen msgspec Struct (0.5.18+)

            owner.linear_attn_backends = msgspec.structs.replace(backends, prefill=type(prefill)(TRITON))
