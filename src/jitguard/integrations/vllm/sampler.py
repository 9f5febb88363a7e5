"""vLLM's top-k/top-p sampler: FlashInfer's sampling kernels (JIT module ``sampling``) or vLLM's own.

vLLM's profile run samples at start-up, so a sampling module that cannot build takes the engine down before it
serves. Three names are guarded, so both model runners are covered in every release: the predicate
``flashinfer_sampler_supported`` (0.23+), ``TopKTopPSampler.__init__`` (to 0.33, where older releases decide
inline) and ``flashinfer_sample``, whose failed first use is recorded and switches this and every later call
to vLLM's own sampling (sampling keeps no state). Where each name lives per release: docs/vllm.md, "Supported vLLM versions".
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from types import ModuleType
from typing import TYPE_CHECKING, Any

from jitguard.decision.engine_verdicts import SAMPLER
from jitguard.errors import BuildFailed
from jitguard.integrations.vllm.sites import Site, deciding, env_flag, function_patch, may_keep, method_patch

if TYPE_CHECKING:
    from jitguard.integrations.choices import ChoiceGuard

MODULE = "vllm.v1.sample.ops.topk_topp_sampler"
CLASS = "TopKTopPSampler"
PREDICATE = "flashinfer_sampler_supported"
SAMPLE = "flashinfer_sample"
VARIABLE = "VLLM_USE_FLASHINFER_SAMPLER"
INSTEAD = f"unset {VARIABLE} (or set it to 0)"


def named() -> str | None:
    """``VLLM_USE_FLASHINFER_SAMPLER=1`` set explicitly (vLLM's ``envs.is_set`` and its value)."""
    return f"{VARIABLE}=1" if env_flag(VARIABLE) else None


# ---- TopKTopPSampler.__init__: the V1 runner's choice, inline in 0.17 - 0.22, gone in 0.34 ----------------
def _guarded_init(original: Any, guard: ChoiceGuard) -> Any:
    @functools.wraps(original)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        chosen = getattr(getattr(self, "forward", None), "__func__", None)
        if chosen is None or chosen is not getattr(type(self), "forward_cuda", None):
            return  # vLLM chose another sampler itself (or jitguard's predicate answered False)
        if not may_keep(guard, SAMPLER, named=named(), instead=INSTEAD):
            self.forward = self.forward_native

    return __init__


# 0.34 removed the V1 runner and this class: its absence is no moved layout (coverage still says so for a
# release that should have it).
_patch_init, _unpatch_init = method_patch(
    CLASS, "__init__", SAMPLER, _guarded_init, needs=("forward_cuda", "forward_native"), optional=True
)


# ---- module functions, imported by name elsewhere (the V2 runner) --------------------
def _guarded_predicate(module: ModuleType, original: Callable[..., Any], guard: ChoiceGuard) -> Any:
    @functools.wraps(original)
    def flashinfer_sampler_supported(*args: Any, **kwargs: Any) -> Any:
        with deciding(SAMPLER):
            answer = original(*args, **kwargs)
        if answer is not True:
            return answer  # vLLM rules FlashInfer out itself (or raised, its own way)
        return may_keep(guard, SAMPLER, named=named(), instead=INSTEAD)

    return flashinfer_sampler_supported


def _guarded_sample(module: ModuleType, original: Callable[..., Any], guard: ChoiceGuard) -> Any:
    failed_over = False

    @functools.wraps(original)
    def flashinfer_sample(logits: Any, k: Any, p: Any, *args: Any, **kwargs: Any) -> Any:
        nonlocal failed_over
        if not failed_over:
            try:
                return original(logits, k, p, *args, **kwargs)
            except BuildFailed as exc:  # classified and recorded by jitguard's build hook
                guard.failed(SAMPLER, exc.findings)
                failed_over = True
        generators = args[0] if args else kwargs.get("generators")
        return native_sample(module, logits, k, p, generators or {})

    return flashinfer_sample


def native_sample(module: ModuleType, logits: Any, k: Any, p: Any, generators: dict[int, Any]) -> Any:
    """What ``flashinfer_sample`` returns (one token id per row), with vLLM's own top-k/top-p from ``module``
    on a copy of the logits (vLLM's may work in place; the caller may still need them), the softmax in
    float32, then the release's ``random_sample`` where it has one (0.17 - 0.33), else ``draw``; per-request
    generators honoured either way."""
    import torch

    filtered = module.apply_top_k_top_p(logits.clone(), k, p)
    probs = filtered.softmax(dim=-1, dtype=torch.float32)
    sample = getattr(module, "random_sample", None)
    return sample(probs, generators) if callable(sample) else draw(probs, generators)


def draw(probs: Any, generators: dict[int, Any]) -> Any:
    """One token id per row of ``probs`` (rows of probabilities), drawn from the row's distribution; a row
    with a generator in ``generators`` (row index -> ``torch.Generator``) draws from that one, so a seeded
    request stays reproducible. (vLLM 0.34's runner calls FlashInfer only for batches without seeds, but the
    function's contract has them.)"""
    import torch

    tokens = torch.multinomial(probs, 1).view(-1)
    for row, generator in generators.items():
        tokens[row] = torch.multinomial(probs[row], 1, generator=generator)[0]
    return tokens


# 0.17 - 0.22 have no predicate (TopKTopPSampler.__init__ decides inline): its absence is no moved layout.
_patch_predicate, _unpatch_predicate = function_patch(
    (PREDICATE,), SAMPLER, _guarded_predicate, optional=True
)
_patch_sample, _unpatch_sample = function_patch((SAMPLE,), SAMPLER, _guarded_sample)

SITES = (
    Site(
        SAMPLER,
        MODULE,
        PREDICATE,
        "0.23+",
        f"{VARIABLE}=1 (on by default)",
        "it answers False: the model runners (V1's TopKTopPSampler to 0.33, V2's Sampler) sample with vLLM's "
        "own code",
        _patch_predicate,
        _unpatch_predicate,
    ),
    Site(
        SAMPLER,
        MODULE,
        f"{CLASS}.__init__",
        "0.17-0.33",  # 0.34 dropped the V1 runner: the predicate and flashinfer_sample do its job
        f"{VARIABLE}=1 (0.17-0.20: the only way in; 0.21+: on by default)",
        "self.forward = forward_native (the PyTorch-native sampler)",
        _patch_init,
        _unpatch_init,
    ),
    Site(
        SAMPLER,
        MODULE,
        SAMPLE,
        "0.17+",
        "(first use: FlashInfer was chosen and passed pre-flight)",
        "a failed first-use build is recorded; that call and every later one sample with vLLM's own "
        "apply_top_k_top_p + random_sample (0.34+: jitguard's draw from the softmax)",
        _patch_sample,
        _unpatch_sample,
    ),
)
