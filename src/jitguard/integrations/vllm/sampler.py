"""vLLM's top-k/top-p sampler: FlashInfer's sampling kernels (JIT module ``sampling``) or PyTorch's.

Every release from 0.17 to 0.33 decides in ``TopKTopPSampler.__init__`` (``vllm/v1/sample/ops/
topk_topp_sampler.py``) by setting ``self.forward`` to ``forward_cuda`` (FlashInfer) or ``forward_native``:

- 0.17 - 0.20: only when ``VLLM_USE_FLASHINFER_SAMPLER=1`` (opt-in);
- 0.21 - 0.22: on by default, inline in ``__init__``; ``VLLM_USE_FLASHINFER_SAMPLER=0`` turns it off;
- 0.23 and later: on by default, through ``flashinfer_sampler_supported()`` (0.33 also asks FlashInfer's
  ``check_cuda_arch``), which raises when the variable was set explicitly and the GPU cannot serve.

vLLM's profile run samples with top-k/top-p at start-up, so the module is built (a few minutes of nvcc on a
cold workspace) and a failed build takes the engine down before it serves (vLLM issue #50705). jitguard
wraps ``__init__`` and, when FlashInfer was chosen, corrects the method: the PyTorch-native sampler when
FlashInfer cannot work here and vLLM chose it on its own; ``ChoiceUnavailable`` when the user named it. When
it passed pre-flight and its first use fails to build anyway, the sampler switches to PyTorch's then and
there (one warning), instead of taking the engine down.
"""

from __future__ import annotations

import functools
from types import ModuleType
from typing import Any

from jitguard.decision.engine import SAMPLER
from jitguard.errors import BuildFailed
from jitguard.integrations.vllm.sites import Guards, Site, env_flag, keeps, layout_moved, mark, original_of

MODULE = "vllm.v1.sample.ops.topk_topp_sampler"
CLASS = "TopKTopPSampler"
VARIABLE = "VLLM_USE_FLASHINFER_SAMPLER"


def named() -> str | None:
    """``VLLM_USE_FLASHINFER_SAMPLER=1`` set explicitly (vLLM's ``envs.is_set`` and its value)."""
    return f"{VARIABLE}=1" if env_flag(VARIABLE) else None


def _patch(module: ModuleType, guards: Guards) -> bool:
    cls = module.__dict__.get(CLASS)
    original = getattr(cls, "__init__", None) if cls is not None else None
    if (
        cls is None
        or not callable(original)
        or not all(hasattr(cls, m) for m in ("forward_cuda", "forward_native"))
    ):
        layout_moved(module.__name__, f"{CLASS}.__init__ with forward_cuda/forward_native", SAMPLER.title)
        return False
    if original_of(original) is not None:
        return True

    @functools.wraps(original)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        chosen = getattr(getattr(self, "forward", None), "__func__", None)
        if chosen is None or chosen is not getattr(type(self), "forward_cuda", None):
            return  # vLLM chose another sampler itself: nothing to check
        how = named()
        if not keeps(guards, SAMPLER, named=how, instead=f"unset {VARIABLE} (or set it to 0)"):
            self.forward = self.forward_native
        elif how is None:
            self.forward = _first_use(self, guards)

    cls.__init__ = mark(__init__, original)
    return True


def _first_use(sampler: Any, guards: Guards) -> Any:
    """FlashInfer's sampler, switching this sampler to PyTorch's when its first use fails to build (a
    classified ``BuildFailed`` from jitguard's build hook: the build hook has recorded it, so the next start
    decides at init). Sampling has no state to carry over, so the switch is safe mid-run; any other error is
    FlashInfer's own and passes through."""
    flashinfer = sampler.forward_cuda

    @functools.wraps(flashinfer)
    def forward(*args: Any, **kwargs: Any) -> Any:
        try:
            return flashinfer(*args, **kwargs)
        except BuildFailed as exc:
            guards.choices.failed(SAMPLER, exc.findings)
            sampler.forward = sampler.forward_native
            return sampler.forward_native(*args, **kwargs)

    return forward


def _unpatch(module: ModuleType) -> None:
    cls = module.__dict__.get(CLASS)
    original = original_of(getattr(cls, "__init__", None))
    if cls is not None and original is not None:
        cls.__init__ = original


SITES = (
    Site(
        SAMPLER,
        MODULE,
        f"{CLASS}.__init__",
        "0.17-0.33",
        f"{VARIABLE}=1 (0.17-0.20: the only way in; 0.21+: on by default)",
        "self.forward = forward_native (the PyTorch-native sampler)",
        _patch,
        _unpatch,
    ),
)
