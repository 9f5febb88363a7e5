"""An SGLang scheduler's ready point for the start ledger: ``Scheduler.__init__`` returned
(``sglang/srt/managers/scheduler.py``): the model is loaded, its kernels warmed and its CUDA graphs captured
(torch.compile included, where it is on), just before ``run_scheduler_process`` tells the launcher it is ready.

Each scheduler (one per tensor-parallel rank) is a process of its own, where SGLang compiles; its plugin
registers at the start of ``run_scheduler_process``, before the ``Scheduler`` is made, so the wrapper is on the
class by then. A release without the class is only a scheduler whose ledger is written at its exit.
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

MODULE = "sglang.srt.managers.scheduler"
CLASS = "Scheduler"
METHOD = "__init__"

_hook: PostImportHook | None = None
_lock = threading.Lock()


def watch() -> None:
    """Wrap the scheduler's ready point now, or when its module is imported."""
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
        return isinstance(cls, type) and patches.wrap(cls, METHOD, _then_ready)

    shielded(
        f"patching {MODULE}", "this scheduler's start ledger is written at its exit", wrap, lambda: False
    )


def _then_ready(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        start_ledger.ready("scheduler")

    return __init__


def undo() -> None:
    """Take the wrapper off (tests)."""
    global _hook
    with _lock:
        if _hook is not None:
            _hook.uninstall()
        _hook = None
    cls = getattr(sys.modules.get(MODULE), CLASS, None)
    if cls is not None:
        patches.undo(cls, METHOD)
