"""vLLM's FlashInfer gates: the ``has_flashinfer*()`` predicates (``vllm/utils/flashinfer.py``) its MoE
oracles, all-reduce fusion, FP8/FP4 GEMMs and autotuning ask before they pick a FlashInfer kernel.

``has_flashinfer()`` only checks presence, so it says True on a host whose JIT link fails. jitguard's answer
is False there (vLLM takes its non-FlashInfer path), or ``ChoiceUnavailable`` for a MoE backend the user
named; a predicate asked while another guarded choice decides answers as vLLM does (``sites.decided_by_another``).
Modules that imported a predicate by name earlier have their binding replaced too (``boundary.patches.rebind``).
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from jitguard.decision.engine_verdicts import KERNELS, MOE, Choice
from jitguard.integrations.vllm.sites import Site, config_value, decided_by_another, function_patch, may_keep

if TYPE_CHECKING:
    from jitguard.integrations.choices import ChoiceGuard

MODULE = "vllm.utils.flashinfer"
MOE_PREDICATES = ("has_flashinfer_moe", "has_flashinfer_cutlass_fused_moe", "has_flashinfer_trtllm_fused_moe")
KERNELS_PREDICATE = "has_flashinfer"
_MOE_VARIABLES = "VLLM_USE_FLASHINFER_MOE_"


def moe_backend_named() -> str | None:
    """``--moe-backend flashinfer_*`` (``kernel_config.moe_backend``): every MoE layer is to use it."""
    backend = str(config_value("kernel_config", "moe_backend") or "").strip().lower()
    return f"--moe-backend {backend}" if backend.startswith("flashinfer") else None


def moe_named() -> str | None:
    """``--moe-backend flashinfer_*``, or a ``VLLM_USE_FLASHINFER_MOE_*=1`` (FP16/FP8/FP4/... paths)."""
    return moe_backend_named() or moe_env_named()


def moe_env_named() -> str | None:
    """A ``VLLM_USE_FLASHINFER_MOE_*`` variable set to anything but 0 (no vLLM import needed to read it)."""
    for name, value in sorted(os.environ.items()):
        if name.startswith(_MOE_VARIABLES) and value.strip() not in ("", "0"):
            return f"{name}={value.strip()}"
    return None


def _never_named() -> str | None:
    return None


def _wrap(
    original: Callable[..., Any],
    guard: ChoiceGuard,
    choice: Choice,
    named: Callable[[], str | None],
    explicit: Callable[[], str | None],
) -> Any:
    """``explicit``: a request that stands whatever vLLM answers (``--moe-backend``): refused at once when it
    cannot work; ``named``: any request, refused when vLLM would go for FlashInfer (its answer is True)."""

    @functools.wraps(original)
    def predicate(*args: Any, **kwargs: Any) -> Any:
        if decided_by_another(choice):
            return original(*args, **kwargs)
        asked = explicit()
        if asked is not None:
            may_keep(guard, choice, named=asked, instead=f"drop {asked}")
        answer = original(*args, **kwargs)
        if answer is not True:
            return answer  # vLLM rules FlashInfer out itself
        how = asked or named()
        return answer if may_keep(guard, choice, named=how, instead=f"drop {how}" if how else "") else False

    return predicate


def _patch_with(
    names: tuple[str, ...],
    choice: Choice,
    named: Callable[[], str | None],
    explicit: Callable[[], str | None] = _never_named,
) -> Any:
    return function_patch(
        names, choice, lambda module, original, guard: _wrap(original, guard, choice, named, explicit)
    )


_patch_moe, _unpatch_moe = _patch_with(MOE_PREDICATES, MOE, moe_named, moe_backend_named)
_patch_kernels, _unpatch_kernels = _patch_with((KERNELS_PREDICATE,), KERNELS, _never_named)

SITES = (
    Site(
        MOE,
        MODULE,
        ", ".join(MOE_PREDICATES),
        "0.17+",
        "--moe-backend flashinfer_cutlass|flashinfer_trtllm|... (or VLLM_USE_FLASHINFER_MOE_*=1)",
        "the predicates answer False: vLLM's MoE oracle takes Triton",
        _patch_moe,
        _unpatch_moe,
    ),
    Site(
        KERNELS,
        MODULE,
        KERNELS_PREDICATE,
        "0.17+",
        "never named on its own",
        "has_flashinfer() answers False: vLLM's own kernels, as on a host without FlashInfer's JIT",
        _patch_kernels,
        _unpatch_kernels,
    ),
)
