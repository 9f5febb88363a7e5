"""vLLM's start, warm from the fleet (``integrations.warm_start``): restored when the plugin registers, before
anything compiles; saved once the engine core has initialised its KV caches, which is also where the engine
core's start ledger is closed (``integrations.start_ledger``: the line in the log, the file).

``EngineCore._initialize_kv_caches`` (vLLM 0.21 - 0.34, ``vllm/v1/engine/core.py``) returns after the profile
run, torch.compile and CUDA graph capture: every JIT cache of the start is filled then. jitguard wraps it on
the class, so the wrapper runs whether the plugin registered before the engine core was created (a forked
engine core inherits it) or at the start of ``EngineCore.__init__`` (a spawned one, which loads the plugins
there). A release without it is only a start that is not saved automatically (``jitguard warm save`` still
works).
"""

from __future__ import annotations

import functools
import logging
import sys
import threading
from collections.abc import Callable
from types import ModuleType
from typing import Any

from jitguard.boundary import patches
from jitguard.boundary.failsafe import shielded
from jitguard.config import Settings
from jitguard.integrations import start_ledger
from jitguard.integrations.import_hooks import PostImportHook

log = logging.getLogger("jitguard.vllm")
MODULE = "vllm.v1.engine.core"
CLASS = "EngineCore"
METHOD = "_initialize_kv_caches"

_hook: PostImportHook | None = None
_settings: Settings | None = None
_lock = threading.Lock()


def restore_before_start(settings: Settings) -> Any:
    """Restore the fleet's snapshot of this stack now (one process per host; the others wait or find it done);
    the outcome (``fleet.warm_start.Outcome``)."""
    # lazy: the fleet (~15 modules) loads when used, not with the plugin's import
    from jitguard.fleet import warm_start

    return warm_start.restore_once(settings, engine="vllm")  # never raises; a no-op without a store


def save_when_ready(settings: Settings) -> None:
    """Watch for vLLM's engine core (now, or when it is imported) and save once it is ready, under
    ``settings`` (the plugin's entry's; a forked engine core keeps them)."""
    global _hook, _settings
    with _lock:
        _settings = settings
        if _hook is None:
            _hook = PostImportHook((MODULE,), _patch)
            _hook.install()
    module = sys.modules.get(MODULE)
    if module is not None:
        _patch(module)


def _patch(module: ModuleType) -> None:
    shielded(
        f"patching {MODULE}",
        "this engine's start is not saved automatically",
        lambda: _wrap(module),
        lambda: False,
    )


def _wrap(module: ModuleType) -> bool:
    cls = getattr(module, CLASS, None)
    if cls is None or not patches.wrap(cls, METHOD, _then_save):
        log.debug("jitguard: %s.%s.%s not found; no automatic warm save", MODULE, CLASS, METHOD)
        return False
    return True


def _then_save(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def initialize_then_save(self: Any, *args: Any, **kwargs: Any) -> Any:
        result = original(self, *args, **kwargs)
        config = args[0] if args else kwargs.get("vllm_config")
        start_ledger.ready("engine-core", compilation_config=getattr(config, "compilation_config", None))
        shielded("saving the warm snapshot", "this start is not saved", _save, lambda: None)
        return result

    return initialize_then_save


def _save() -> None:
    # lazy: the fleet (~15 modules) loads when used, not with the plugin's import
    from jitguard.fleet import warm_start

    if _settings is not None:
        warm_start.save_when_ready(_settings, engine="vllm")


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
