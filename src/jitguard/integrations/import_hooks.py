"""Post-import hooks: run a callback on a module the moment it has been imported, without importing it.

jitguard patches objects in FlashInfer (``flashinfer.jit.core``) and in vLLM (its GDN layer modules). Importing
those packages to patch them would make ``import jitguard``, ``jitguard.install()`` and vLLM's plugin hook cost
seconds (torch, CUDA) and would load vLLM's model code in processes that never build a GDN model. So jitguard
patches lazily: a finder at the front of ``sys.meta_path`` that finds nothing itself, but wraps the loader the
other finders return for a watched module, so the patch runs right after the module's own code, before anyone
else can use it. A module imported before the hook was installed is the caller's business
(``sys.modules``): the hook only sees imports that happen after ``install()``.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import threading
from collections.abc import Callable, Iterable, Sequence
from types import ModuleType
from typing import Any

OnImport = Callable[[ModuleType], None]

_lock = threading.RLock()


class PostImportHook(importlib.abc.MetaPathFinder):
    """Calls ``on_import(module)`` after each watched module's code has run. Finds nothing itself: the spec
    comes from the finders after it on ``sys.meta_path``, with its loader wrapped."""

    def __init__(self, names: Iterable[str], on_import: OnImport) -> None:
        self.names = frozenset(names)
        self._on_import = on_import
        # Names this hook is resolving, per thread: another hook watching the same module asks the finders
        # again (this one included) and must not send the question back here.
        self._resolving = threading.local()

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname not in self.names:
            return None
        busy: set[str] = self._resolving.__dict__.setdefault("names", set())
        if fullname in busy:
            return None
        busy.add(fullname)
        try:
            for finder in sys.meta_path:
                if finder is self or not hasattr(finder, "find_spec"):
                    continue
                spec = finder.find_spec(fullname, path, target)
                if spec is not None:
                    if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                        spec.loader = _PatchingLoader(spec.loader, self._on_import)
                    return spec
            return None
        finally:
            busy.discard(fullname)

    def install(self) -> None:
        """Put this hook first on ``sys.meta_path`` (idempotent: once, however often called)."""
        with _lock:
            if self not in sys.meta_path:
                sys.meta_path.insert(0, self)

    def uninstall(self) -> None:
        """Take this hook off ``sys.meta_path`` (idempotent). Modules it already patched stay patched."""
        with _lock:
            while self in sys.meta_path:
                sys.meta_path.remove(self)


class _PatchingLoader(importlib.abc.Loader):
    """Runs the real loader, then the hook's callback on the module it executed."""

    def __init__(self, inner: importlib.abc.Loader, on_import: OnImport) -> None:
        self._inner = inner
        self._on_import = on_import

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self._inner.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self._inner.exec_module(module)
        self._on_import(module)

    def __getattr__(self, name: str) -> Any:
        # Everything else (get_source, is_package, resource readers) is the real loader's.
        return getattr(self._inner, name)
