"""vLLM's attention backend: FlashInfer's attention kernels (JIT modules ``batch_prefill_*``,
``batch_decode_*``, ..., one per head size, dtype and KV-cache dtype) or the next backend vLLM trusts.

Every release from 0.17 to 0.33 selects in ``CudaPlatform.get_attn_backend_cls``: a backend named with
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
from types import ModuleType
from typing import Any

from jitguard.decision.engine import ATTENTION, KV_CACHE, Choice
from jitguard.integrations.vllm.sites import (
    Guards,
    Site,
    config_value,
    enum_name,
    keeps,
    layout_moved,
    mark,
    original_of,
)

MODULE = "vllm.v1.attention.backends.flashinfer"
CLASS = "FlashInferBackend"
METHOD = "validate_configuration"
NAME = "FLASHINFER"
_KV_POSITION = 2  # validate_configuration(head_size, dtype, kv_cache_dtype, ...)
_OWN = "__jitguard_defined_here__"  # whether the class itself defined the method (else it is inherited)


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


def _patch(module: ModuleType, guards: Guards) -> bool:
    cls = module.__dict__.get(CLASS)
    original = getattr(cls, METHOD, None) if cls is not None else None
    if cls is None or not callable(original):
        layout_moved(module.__name__, f"{CLASS}.{METHOD}", ATTENTION.title)
        return False
    if original_of(original) is not None:
        return True

    @functools.wraps(original)
    def validate_configuration(klass: Any, *args: Any, **kwargs: Any) -> Any:
        reasons = original(*args, **kwargs)
        if reasons or not isinstance(reasons, list):
            return (
                reasons  # vLLM rules FlashInfer out itself (or answers in a shape this wrapper does not know)
            )
        choice = choice_for(args, kwargs)
        how = named()
        if keeps(guards, choice, named=how, instead=f"drop {how or '--attention-backend'}"):
            return reasons
        return [f"jitguard: {choice.title} cannot work here (see `jitguard doctor --engine vllm`)"]

    wrapper = mark(validate_configuration, original)
    setattr(wrapper, _OWN, METHOD in cls.__dict__)
    setattr(cls, METHOD, classmethod(wrapper))
    return True


def _unpatch(module: ModuleType) -> None:
    cls = module.__dict__.get(CLASS)
    wrapper = getattr(getattr(cls, METHOD, None), "__func__", None)
    if cls is None or original_of(wrapper) is None:
        return
    if getattr(wrapper, _OWN, False):
        setattr(cls, METHOD, classmethod(original_of(wrapper).__func__))
    else:
        delattr(cls, METHOD)  # it was inherited: the base class's again


SITES = (
    Site(
        ATTENTION,
        MODULE,
        f"{CLASS}.{METHOD}",
        "0.17-0.33",
        f"--attention-backend {NAME} (VLLM_ATTENTION_BACKEND={NAME} in older releases)",
        "a reason added to FlashInfer's invalid reasons: vLLM's priority walk takes the next valid backend",
        _patch,
        _unpatch,
    ),
)
