"""vLLM's torch.compile cache key, the same on every host of one image, whatever its HOME and XDG roots.

vLLM keys its compile cache (``<VLLM_CACHE_ROOT>/torch_compile_cache/<key>``, and its AOT artifacts) on a hash
of ``vllm.envs.compile_factors()``. Through 0.26 at least, those factors hold ``VLLM_CONFIG_ROOT`` and
``VLLM_XLA_CACHE_PATH``, paths derived from HOME and the XDG roots: a host whose home or cache root differs
computes another key, and the snapshot restored from the store is never looked at (0.30 ignores both, as
"location-only derived paths"). jitguard drops the same two factors in every release, so a restored key
directory is the one this host looks for. A stock start's cache on a host that just installed jitguard is
keyed the old way and misses once.
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
from jitguard.integrations.import_hooks import PostImportHook

MODULE = "vllm.envs"
FUNCTION = "compile_factors"
LOCATION_ONLY = ("VLLM_CONFIG_ROOT", "VLLM_XLA_CACHE_PATH")  # where a directory lives, not what compiles

_hook: PostImportHook | None = None
_lock = threading.Lock()


def relocatable() -> None:
    """Key vLLM's compile cache without location-only factors, now or when ``vllm.envs`` is imported."""
    global _hook
    with _lock:
        if _hook is None:
            _hook = PostImportHook((MODULE,), _patch)
            _hook.install()
    module = sys.modules.get(MODULE)
    if module is not None:
        _patch(module)


def _patch(module: ModuleType) -> None:
    shielded(
        f"patching {MODULE}.{FUNCTION}",
        "vLLM's compile cache is keyed as vLLM keys it (a host under another HOME misses it)",
        lambda: patches.wrap(module, FUNCTION, _without_locations, rebind_under="vllm"),
        lambda: False,
    )


def _without_locations(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def compile_factors(*args: Any, **kwargs: Any) -> Any:
        factors = original(*args, **kwargs)
        if isinstance(factors, dict):
            for name in LOCATION_ONLY:
                factors.pop(name, None)
        return factors

    return compile_factors


def undo() -> None:
    """vLLM's own ``compile_factors`` back (tests; ``unregister``)."""
    global _hook
    with _lock:
        if _hook is not None:
            _hook.uninstall()
        _hook = None
    module = sys.modules.get(MODULE)
    if module is not None:
        patches.undo(module, FUNCTION, rebind_under="vllm")
