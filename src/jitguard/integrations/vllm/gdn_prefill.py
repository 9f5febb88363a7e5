"""vLLM's GDN prefill backend choice, found by name in each released layout of vLLM's GDN layer (``LAYOUTS``:
``_resolve_gdn_prefill_backend`` from 0.22, ``ChunkGatedDeltaRule.__init__`` before).

Only a choice of FlashInfer is examined; the process's ``ChoiceGuard`` judges it once, so every layer (and
vLLM's GDN metadata builder) agrees: it stands, moves to Triton/FLA with one warning (``auto``), or stops the
engine at init (``--gdn-prefill-backend flashinfer``). Ranks decide alike: host facts and the failure cache
only. The layouts per release: docs/vllm.md, "Supported vLLM versions".
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING, Any

from jitguard.boundary import patches
from jitguard.boundary.failsafe import shielded
from jitguard.decision.engine_verdicts import GDN_PREFILL, normalise_request
from jitguard.integrations.vllm import proof_call, warmup
from jitguard.integrations.vllm.sites import Site, function_patch, layout_moved, may_keep

if TYPE_CHECKING:
    from jitguard.integrations.choices import ChoiceGuard

log = logging.getLogger("jitguard.vllm")

FLASHINFER = "flashinfer"
TRITON = "triton"
# The name vLLM gives the option, in its config (additional_config) and on its command line.
OPTION = "gdn_prefill_backend"
FLAG = "--gdn-prefill-backend"
INSTEAD = f"serve with {FLAG} {TRITON}, or without {FLAG}"


@dataclass(frozen=True)
class Layout:
    """Where one family of vLLM releases decides the GDN prefill backend."""

    module: str
    target: str  # the function or method jitguard wraps
    releases: str


RESOLVER_SITE = Layout(
    "vllm.model_executor.layers.mamba.gdn.qwen_gdn_linear_attn", "_resolve_gdn_prefill_backend", "0.22+"
)
LAYER_INIT_SITE = Layout(
    "vllm.model_executor.layers.mamba.gdn_linear_attn", "ChunkGatedDeltaRule.__init__", "0.19-0.21"
)
MODEL_FILE = Layout("vllm.model_executor.models.qwen3_next", "ChunkGatedDeltaRule.__init__", "0.17-0.18")
LAYOUTS = (RESOLVER_SITE, LAYER_INIT_SITE, MODEL_FILE)


def choose(guard: ChoiceGuard, requested: str, chosen: str) -> str:
    """The backend vLLM should use after it resolved ``requested`` to ``chosen``: only a choice of FlashInfer
    is judged; Triton where FlashInfer cannot work; ``ChoiceUnavailable`` when it was asked for by name."""
    if chosen != FLASHINFER:
        return chosen
    named = f"{FLAG} {FLASHINFER}" if requested == FLASHINFER else None
    kept = may_keep(guard, GDN_PREFILL, named=named, instead=INSTEAD, asked=f"{FLAG} {requested}")
    return chosen if kept else TRITON


# ---- the patches, one per layout --------------------------------------------------------------------------
def _guarded_resolver(module: ModuleType, original: Any, guard: ChoiceGuard) -> Any:
    """vLLM >= 0.22: ``_resolve_gdn_prefill_backend(vllm_config) -> (requested, active)``, corrected."""

    @functools.wraps(original)
    def resolve_gdn_prefill_backend(*args: Any, **kwargs: Any) -> Any:
        result = original(*args, **kwargs)
        try:
            requested, active = result
        except (TypeError, ValueError):
            return result  # not the (requested, active) pair this wrapper knows: leave it alone
        asked = normalise_request(requested)
        warmup.requested(asked)
        backend = choose(guard, asked, str(active))  # the guard's one shield: may_keep
        if backend == FLASHINFER:
            _expect_gdn_variants(args[0] if args else kwargs.get("vllm_config"), guard)
        return result if backend == active else (requested, backend)

    return resolve_gdn_prefill_backend


_patch_resolver, _unpatch_resolver = function_patch((RESOLVER_SITE.target,), GDN_PREFILL, _guarded_resolver)


def _patch_current(module: ModuleType, guard: ChoiceGuard) -> bool:
    """vLLM >= 0.22: the resolver, and the GDN layers' own prefill warmup, watched as evidence
    (``warmup``): a release without the warmup has nothing more to watch."""
    patched = _patch_resolver(module, guard)
    if patched:
        warmup.watch(module, guard)
    return patched


def _unpatch_current(module: ModuleType) -> None:
    warmup.unwatch(module)
    _unpatch_resolver(module)


def _patch_op_init(module: ModuleType, guard: ChoiceGuard) -> bool:
    """vLLM 0.17-0.21: the choice lives in ``ChunkGatedDeltaRule.__init__``, which reads the option (0.18+)
    from the current vLLM config and sets ``self._forward_method`` to ``forward_cuda`` (FlashInfer) or
    ``forward_native`` (Triton/FLA). Wrap it and correct the method it picked; where the module's GDN layer
    warms its prefill up (0.18-0.21), watch that too (``warmup``), else prove it (0.17: ``proof``). (In later
    releases ``models/qwen3_next.py`` no longer defines the op: a debug line says so.)"""
    cls = module.__dict__.get("ChunkGatedDeltaRule")
    if cls is None or not callable(getattr(cls, "__init__", None)) or not hasattr(cls, "forward_native"):
        if module.__name__ == MODEL_FILE.module:  # later releases keep only the model here: expected
            log.debug("jitguard: %s defines no ChunkGatedDeltaRule; nothing to guard there", module.__name__)
        else:
            layout_moved(module.__name__, "ChunkGatedDeltaRule.__init__", GDN_PREFILL.title)
        return False

    def requested_backend() -> str:
        get_config = getattr(module, "get_current_vllm_config", None)
        extra = getattr(get_config(), "additional_config", None) if callable(get_config) else None
        return normalise_request(extra.get(OPTION) if isinstance(extra, Mapping) else None)

    def wrap(original: Any) -> Any:
        @functools.wraps(original)
        def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
            original(self, *args, **kwargs)
            if getattr(self, "_forward_method", None) != self.forward_cuda:
                return  # vLLM chose Triton/FLA itself: nothing to check
            asked = shielded("reading vLLM's GDN prefill option", "auto", requested_backend, _auto)
            warmup.requested(asked)
            backend = choose(guard, asked, FLASHINFER)  # the guard's one shield: may_keep
            if backend != FLASHINFER:
                self._forward_method = self.forward_native
            else:
                get_config = getattr(module, "get_current_vllm_config", None)
                _expect_gdn_variants(get_config() if callable(get_config) else None, guard)

        return __init__

    patched = patches.wrap(cls, "__init__", wrap)
    if patched and not warmup.watch(module, guard):  # 0.18-0.21: the GDN layer's own warmup, watched
        proof_call.watch(module, guard)  # 0.17: no warmup, so jitguard's own proof call
    return patched


def _auto() -> str:
    return "auto"


def _unpatch_op_init(module: ModuleType) -> None:
    warmup.unwatch(module)
    proof_call.unwatch(module)
    cls = module.__dict__.get("ChunkGatedDeltaRule")
    if cls is not None:
        patches.undo(cls, "__init__")


def _expect_gdn_variants(vllm_config: Any, guard: ChoiceGuard) -> None:
    """FlashInfer GDN prefill it is: tell jitguard's variant router the instances this model will call, from
    its config and dtype (vLLM always passes beta, alpha and an initial state), before the first call."""

    def expect() -> None:
        model_config = getattr(vllm_config, "model_config", None)
        hf = getattr(model_config, "hf_text_config", None) or getattr(model_config, "hf_config", None)
        to_dict = getattr(hf, "to_dict", None)
        if callable(to_dict):
            # lazy: under the shield that plans the variants, not with the plugin's import
            from jitguard.integrations.flashinfer_hook import expect_gdn_variants

            dtype = getattr(model_config, "dtype", None)
            expect_gdn_variants(
                to_dict(),
                str(dtype) if dtype is not None else None,
                guard.settings,
                source="the model config",
            )

    shielded(
        "planning FlashInfer's GDN prefill variants", "the first call decides them", expect, lambda: None
    )


_NAMED = f"{FLAG} {FLASHINFER} (additional_config {OPTION})"
_ANSWER = "Triton/FLA: the resolver's answer, or ChunkGatedDeltaRule._forward_method = forward_native"
SITES = (
    Site(
        GDN_PREFILL,
        RESOLVER_SITE.module,
        RESOLVER_SITE.target,
        "0.22+",
        _NAMED,
        _ANSWER,
        _patch_current,
        _unpatch_current,
        layout=True,
    ),
    Site(
        GDN_PREFILL,
        LAYER_INIT_SITE.module,
        LAYER_INIT_SITE.target,
        "0.19-0.21",
        _NAMED,
        _ANSWER,
        _patch_op_init,
        _unpatch_op_init,
        layout=True,
    ),
    Site(
        GDN_PREFILL,
        MODEL_FILE.module,
        MODEL_FILE.target,
        "0.17-0.18",
        f"{_NAMED}; 0.17 has no option (FlashInfer on every SM90)",
        _ANSWER,
        _patch_op_init,
        _unpatch_op_init,
        layout=True,
    ),
)
