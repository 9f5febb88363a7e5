"""vLLM's attention backend: FlashInfer's attention kernels (JIT modules ``batch_prefill_*``,
``batch_decode_*``, ..., one per head size, dtype and KV-cache dtype) or the next backend vLLM trusts.

Every release from 0.17 to 0.34 selects in ``CudaPlatform.get_attn_backend_cls``: a backend named with
``--attention-backend`` (``attention_config.backend``; ``VLLM_ATTENTION_BACKEND`` in older releases) is
validated alone and an invalid one raises; otherwise vLLM walks its priority list (FlashInfer first on
Blackwell) and takes the first backend whose ``validate_configuration(...)`` returns no reasons. jitguard
wraps ``FlashInferBackend.validate_configuration`` (``vllm/v1/attention/backends/flashinfer.py``): when
FlashInfer cannot work here it adds its reason, so vLLM's own walk takes the next backend; when the user
named FLASHINFER it raises ``ChoiceUnavailable`` with the cause and the fix. An FP8 KV cache is judged as
its own choice (``kv-cache``), with the same facts.
"""

from __future__ import annotations

import functools
import os
from typing import TYPE_CHECKING, Any

from jitguard.decision.engine_verdicts import ATTENTION, KV_CACHE, Choice
from jitguard.integrations.vllm.sites import Site, config_value, enum_name, may_keep, method_patch

if TYPE_CHECKING:
    from jitguard.integrations.choices import ChoiceGuard

MODULE = "vllm.v1.attention.backends.flashinfer"
CLASS = "FlashInferBackend"
METHOD = "validate_configuration"
NAME = "FLASHINFER"
_KV_POSITION = 2  # validate_configuration(head_size, dtype, kv_cache_dtype, ...)


def named() -> str | None:
    """``--attention-backend FLASHINFER`` (``attention_config.backend``) or ``VLLM_ATTENTION_BACKEND``."""
    if enum_name(config_value("attention_config", "backend")) == NAME:
        return f"--attention-backend {NAME}"
    return env_named()


def env_named() -> str | None:
    """``VLLM_ATTENTION_BACKEND=FLASHINFER`` (older releases' way; no vLLM import needed to read it)."""
    if os.environ.get("VLLM_ATTENTION_BACKEND", "").strip().upper() == NAME:
        return f"VLLM_ATTENTION_BACKEND={NAME}"
    return None


def choice_for(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Choice:
    kv = kwargs.get("kv_cache_dtype", args[_KV_POSITION] if len(args) > _KV_POSITION else None)
    return KV_CACHE if str(kv or "").lower().startswith("fp8") else ATTENTION


def _guarded(original: Any, guard: ChoiceGuard) -> Any:
    @functools.wraps(original)
    def validate_configuration(klass: Any, *args: Any, **kwargs: Any) -> Any:
        reasons = original(*args, **kwargs)
        if reasons or not isinstance(reasons, list):
            return (
                reasons  # vLLM rules FlashInfer out itself (or answers in a shape this wrapper does not know)
            )
        choice = choice_for(args, kwargs)
        how = named()
        if may_keep(guard, choice, named=how, instead=f"drop {how or '--attention-backend'}"):
            return reasons
        return [f"jitguard: {choice.title} cannot work here (see `jitguard doctor --engine vllm`)"]

    return validate_configuration


_patch, _unpatch = method_patch(CLASS, METHOD, ATTENTION, _guarded)


SITES = (
    Site(
        ATTENTION,
        MODULE,
        f"{CLASS}.{METHOD}",
        "0.17+",
        f"--attention-backend {NAME} (VLLM_ATTENTION_BACKEND={NAME} in older releases)",
        "a reason added to FlashInfer's invalid reasons: vLLM's priority walk takes the next valid backend",
        _patch,
        _unpatch,
    ),
)
