"""vLLM's own GDN prefill warmup as evidence: a FlashInfer choice jitguard admitted is proven, or moved, before
the engine reports ready.

vLLM (0.21+) runs every GDN layer's prefill once in its profile run and only logs a failure, so a FlashInfer
that cannot run lets the engine report ready and die at its first request. jitguard watches that call: when it
runs, FlashInfer is proven in this process; when it raises, the failure is settled as every failed proof is
(``integrations/proof.py``: recorded by fingerprint, ``auto`` moved to Triton/FLA with the warmup rerun there,
a named FlashInfer stopped). It does not depend on foreseeing the cause (docs/vllm.md).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from types import ModuleType
from typing import TYPE_CHECKING, Any

from jitguard.boundary import patches
from jitguard.boundary.failsafe import shielded
from jitguard.decision.engine_verdicts import GDN_PREFILL
from jitguard.integrations.proof import WARMUP_FAILED, Trial, settle

if TYPE_CHECKING:
    from jitguard.integrations.choices import ChoiceGuard

log = logging.getLogger("jitguard.vllm")

METHOD = "_warmup_prefill_kernels"
FLAG = "_prefill_kernels_warmed_up"  # the layer's "warmed up already"
TRITON = "triton"
WHERE = "GDN prefill warmup (`_warmup_prefill_kernels`, in the profile run)"
MOVED = "jitguard switched every GDN layer to Triton/FLA before the engine reports ready."
_state: dict[str, Any] = {"requested": "auto"}  # one per process: the resolver site tells it


def requested(value: str) -> None:
    """What the user asked for (``auto``, ``flashinfer``): told by the resolver site, read when a warmup fails."""
    _state["requested"] = value


def watch(module: ModuleType, guard: ChoiceGuard) -> bool:
    """Wrap the warmup method of every class in ``module`` that defines one (vLLM 0.21+); False where none
    does (older releases: no warmup to watch, jitguard's own proof call instead: ``vllm/proof_call.py``)."""
    found = False
    for value in list(module.__dict__.values()):
        if isinstance(value, type) and METHOD in value.__dict__ and value.__module__ == module.__name__:
            found = patches.wrap(value, METHOD, lambda original: _watched(original, guard)) or found
    return found


def unwatch(module: ModuleType) -> None:
    for value in list(module.__dict__.values()):
        if isinstance(value, type) and METHOD in value.__dict__:
            patches.undo(value, METHOD)


def _watched(original: Callable[..., Any], guard: ChoiceGuard) -> Callable[..., Any]:
    @functools.wraps(original)
    def _warmup_prefill_kernels(self: Any, *args: Any, **kwargs: Any) -> Any:
        op: Any = getattr(self, "chunk_gated_delta_rule", None)
        if getattr(self, FLAG, False) or not on_flashinfer(op):
            return original(self, *args, **kwargs)
        if guard.known_failed(GDN_PREFILL):  # an earlier layer's warmup failed: this one moves before its own
            shielded(
                "moving a GDN layer to Triton/FLA",
                "vLLM's choice stands",
                lambda: to_triton(self, op),
                _nothing,
            )
            return original(self, *args, **kwargs)
        failures: list[BaseException] = []
        flashinfer = op._forward_method

        def forward_cuda(*a: Any, **k: Any) -> Any:
            try:
                return flashinfer(*a, **k)
            except Exception as exc:
                failures.append(exc)
                raise

        op._forward_method = forward_cuda
        try:
            result = original(self, *args, **kwargs)  # vLLM's own try/except logs the failure and goes on
        finally:
            if op._forward_method is forward_cuda:
                op._forward_method = flashinfer
        if not failures:
            shielded(
                "FlashInfer GDN prefill's proof",
                "nothing",
                lambda: guard.proven(GDN_PREFILL, WHERE),
                _nothing,
            )
            return result
        settled = shielded(
            "vLLM's failed GDN prefill warmup",
            "vLLM's choice stands",
            lambda: _settle(guard, failures[0]),
            lambda: False,
        )
        if settled:  # auto: Triton/FLA from now on, and this layer's warmup once more, on Triton
            to_triton(self, op)
            _not_warmed(self, original)
            return original(self, *args, **kwargs)
        return result

    return _warmup_prefill_kernels


def _nothing() -> None:
    return None


def _not_warmed(layer: Any, original: Callable[..., Any]) -> None:
    """Let ``layer``'s warmup run again: 0.22+ test a flag their ``__init__`` sets False, 0.21 test whether
    the attribute exists at all (``hasattr``)."""
    code = getattr(original, "__code__", None)
    if code is not None and "hasattr" in code.co_names:
        layer.__dict__.pop(FLAG, None)
    else:
        setattr(layer, FLAG, False)


def on_flashinfer(op: Any) -> bool:
    forward_cuda = getattr(op, "forward_cuda", None)
    return forward_cuda is not None and getattr(op, "_forward_method", None) == forward_cuda


def to_triton(layer: Any, op: Any) -> None:
    op._forward_method = op.forward_native
    for owner in (op, layer):
        if hasattr(owner, "gdn_prefill_backend"):
            owner.gdn_prefill_backend = TRITON


def _settle(guard: ChoiceGuard, exc: BaseException) -> bool:
    """Record ``exc`` and tell the guard (``integrations/proof.py``, shared with jitguard's own proof call);
    True when the layers move to Triton/FLA (auto). A named FlashInfer raises ``ChoiceUnavailable``."""
    return settle(guard, trial(), exc, code=WARMUP_FAILED)


def trial() -> Trial:
    """vLLM's GDN prefill as this process asked for it (the resolver site tells ``requested``)."""
    # lazy: a cycle (vllm.gdn_prefill imports this module at its top)
    from jitguard.integrations.vllm.gdn_prefill import FLAG, FLASHINFER, INSTEAD

    named = f"{FLAG} {FLASHINFER}" if _state["requested"] == FLASHINFER else None
    return Trial(GDN_PREFILL, WHERE, named, INSTEAD, MOVED)
