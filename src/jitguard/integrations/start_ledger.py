"""The start ledger at the engine boundary: begun when a plugin registers, told which warm snapshot covers the
start, and closed where the engine is ready (``jitguard.ledger`` holds the record, the tools' hooks and the
files; this module only finds the tools as they are imported and calls it at the right moments).

Triton is watched the moment ``triton.knobs`` (its compilation listener) and ``triton.runtime.autotuner`` are
imported, without jitguard importing Triton. Every step is shielded: the ledger never changes what the
engine does.
"""

from __future__ import annotations

import sys
import threading
from types import ModuleType
from typing import Any

from jitguard.boundary.failsafe import shielded
from jitguard.config import Settings
from jitguard.integrations.import_hooks import PostImportHook
from jitguard.ledger import start as ledger
from jitguard.ledger import tally, tools

TRITON_KNOBS = "triton.knobs"
TRITON_AUTOTUNER = "triton.runtime.autotuner"
_hook: PostImportHook | None = None
_lock = threading.Lock()


def begin(engine: str, settings: Settings, *, import_s: float = 0.0) -> None:
    """Begin this process's ledger (kept under ``settings``' cache dir: the engine entry's) and watch Triton
    (idempotent)."""
    global _hook

    def start() -> None:
        global _hook

        ledger.begin(engine, import_s=import_s, cache_dir=settings.cache_dir)
        with _lock:
            if _hook is None:
                _hook = PostImportHook((TRITON_KNOBS, TRITON_AUTOTUNER), _on_triton)
                _hook.install()
        for name in (TRITON_KNOBS, TRITON_AUTOTUNER):
            module = sys.modules.get(name)
            if module is not None:
                _on_triton(module)

    shielded("the start ledger", "this start is not recorded", start, lambda: None)


def _on_triton(module: ModuleType) -> None:
    def watch() -> None:
        knobs = sys.modules.get(TRITON_KNOBS)
        autotuner = sys.modules.get(TRITON_AUTOTUNER)
        if module.__name__ == TRITON_KNOBS or knobs is not None:
            said = tools.watch_triton(knobs, autotuner)
            current = tally.current()
            if current is not None:
                current.note(said, about="Triton:")

    shielded("watching Triton for the start ledger", "Triton's kernels are not counted", watch, lambda: None)


def covered_by(outcome: Any, engine: str, settings: Settings) -> None:
    """The warm start's ``outcome`` (``fleet.warm_start.Outcome``) decides which layers must hit, under the
    engine entry's ``settings`` (``JITGUARD_WARM``, ``JITGUARD_WARM_NAME``)."""

    def tell() -> None:
        ledger.covered_by(
            outcome.action, settings.warm_name, settings.warm, outcome.layers, engine, settings.cache_dir
        )

    shielded("the start ledger's warm snapshot", "must-hit is not checked", tell, lambda: None)


def ready(role: str, *, compilation_config: Any = None) -> None:
    """The engine is ready in this process: the ledger's line and file."""

    def close() -> None:
        ledger.ready(role, compilation_config=compilation_config)

    shielded("the start ledger at ready", "this start is not recorded", close, lambda: None)


def undo() -> None:
    """Stop watching Triton's imports (tests; ``unregister``)."""
    global _hook
    with _lock:
        if _hook is not None:
            _hook.uninstall()
        _hook = None
