"""vLLM's top-k/top-p sampler: FlashInfer's sampling kernels (JIT module ``sampling``) or vLLM's own.

vLLM had two model runners until 0.33, each deciding on its own; 0.34 kept only the second
(``vllm/v1/sample/ops/topk_topp_sampler.py`` holds the decision and FlashInfer's call for both):

- V1 (``vllm/v1/sample/sampler.py``, 0.17 - 0.33): ``TopKTopPSampler.__init__`` sets ``self.forward`` to
  ``forward_cuda`` (FlashInfer) or ``forward_native``. 0.17 - 0.20: only when ``VLLM_USE_FLASHINFER_SAMPLER=1``
  (opt-in); 0.21 - 0.22: on by default, inline in ``__init__``; 0.23 - 0.33: through
  ``flashinfer_sampler_supported()`` (0.33 also asks FlashInfer's ``check_cuda_arch``), which raises when the
  variable was set explicitly and the GPU cannot serve. 0.34 removed this runner, ``TopKTopPSampler`` with it.
- V2 (``vllm/v1/worker/gpu/sample/sampler.py``, 0.23 and later; the default runner for Qwen3, Llama and
  Mistral in 0.24, the only one from 0.34): ``Sampler.__init__`` keeps ``flashinfer_sampler_supported()`` as
  ``use_flashinfer`` and ``Sampler._sample_random`` calls ``flashinfer_sample()``, both imported by name.
  0.34's predicate also asks ``has_flashinfer()`` first; jitguard's umbrella verdict on FlashInfer's other
  kernels stays out of it (``sites.decided_by_another``): the sampler is judged on its own modules.

vLLM's profile run samples with top-k/top-p at start-up, so the module is built (a few minutes of nvcc on a
cold workspace) and a failed build takes the engine down before it serves (vLLM issue #50705). jitguard
guards three names, so that both runners are covered whatever the release:

- ``flashinfer_sampler_supported`` (0.23+): when vLLM answers True and FlashInfer cannot work here, the
  answer becomes False (both runners then take vLLM's own sampling), or ``ChoiceUnavailable`` when the user
  named FlashInfer with ``VLLM_USE_FLASHINFER_SAMPLER=1``;
- ``TopKTopPSampler.__init__`` (0.17 - 0.33): the same verdict where the release decides inline
  (0.17 - 0.22); a release without the class (0.34+) has its choice made by the predicate alone;
- ``flashinfer_sample`` (0.17+): FlashInfer passed pre-flight and its first use fails to build anyway: the
  classified failure is recorded (the next start decides at init), said once, and this call and every later
  one sample with vLLM's own top-k/top-p (``apply_top_k_top_p``) and, where the release has it, its
  ``random_sample`` of the softmax (what ``forward_native`` does; 0.34 has none: jitguard draws from the
  softmax itself) instead of taking the engine down. Sampling keeps no state, so the switch is safe mid-run.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from types import ModuleType
from typing import TYPE_CHECKING, Any

from jitguard.decision.engine import SAMPLER
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
