"""A vLLM worker's ready point for the start ledger: ``Worker.compile_or_warm_up_model`` returned
(``vllm/v1/worker/gpu_worker.py``, vLLM 0.21 - 0.34: torch.compile, the warmup and CUDA graph capture are done).

With one GPU the worker runs in the EngineCore process and this closes the same ledger a moment before the
engine core does; with tensor parallelism each worker is a process of its own, where the model compiles, and
this is where its ledger is written. A release without the method is only a worker whose ledger is written at
its exit.
"""

from __future__ import annotations

import functools
import sys
import threading
from collections.abc import Callable
from types import ModuleType
from typing import Any

from jitguard.boundary import patches
from jitguard.boundary.failsafe import shielded
from jitguard.integrations import start_ledger
from jitguard.integrations.import_hooks import PostImportHook

MODULE = "vllm.v1.worker.gpu_worker"
CLASS = "Worker"
METHOD = "compile_or_warm_up_model"

_hook: PostImportHook | None = None
_lock = threading.Lock()


def watch() -> None:
    """Wrap the worker's ready point now, or when its module is imported."""
    global _hook
    with _lock:
        if _hook is None:
            _hook = PostImportHook((MODULE,), _patch)
            _hook.install()
    module = sys.modules.get(MODULE)
    if module is not None:
        _patch(module)


def _patch(module: ModuleType) -> None:
    def wrap() -> bool:
        cls = getattr(module, CLASS, None)
        return cls is not None and patches.wrap(cls, METHOD, _then_ready)

    shielded(f"patching {MODULE}", "this worker's start ledger is written at its exit", wrap, lambda: False)


def _then_ready(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def compile_or_warm_up_model(self: Any, *args: Any, **kwargs: Any) -> Any:
        result = original(self, *args, **kwargs)
        config = getattr(self, "compilation_config", None) or getattr(
            getattr(self, "vllm_config", None), "compilation_config", None
        )
        start_ledger.ready("worker", compilation_config=config)
        return result

    return compile_or_warm_up_model


def undo() -> None:
    """Take the wrapper off (tests; ``unregister``)."""
    global _hook
    with _lock:
        if _hook is not None:
            _hook.uninstall()
        _hook = None
    cls = getattr(sys.modules.get(MODULE), CLASS, None)
    if cls is not None:
        patches.undo(cls, METHOD)
