"""The one way jitguard replaces a function it does not own (in vLLM, SGLang, FlashInfer): mark, find, wrap,
rebind, undo.

``wrap(owner, name, make)`` puts ``make(original)`` in ``owner.name`` (a module function, a method, a
classmethod), marked with the original so it is found again (``original_of``, ``is_wrapped``): wrapping twice
wraps once. ``rebind_under="vllm"`` also replaces the original wherever a loaded module under that package
imported it by name (``from x import f`` copies the binding). ``undo`` puts back exactly what was there,
an inherited method included (it is deleted again, so the base class's shows through).
"""

from __future__ import annotations

import inspect
import sys
from collections.abc import Callable
from typing import Any

MARK = "__jitguard_original__"
_STATIC = "__jitguard_replaced__"  # what the owner itself held before (absent: inherited)
_ABSENT = object()


def original_of(obj: Any) -> Any:
    """What jitguard wrapped, or None when ``obj`` is not one of its wrappers (bound methods included)."""
    return getattr(obj, MARK, None)


def is_wrapped(owner: Any, name: str) -> bool:
    return original_of(getattr(owner, name, None)) is not None


def mark(wrapper: Any, original: Any) -> Any:
    setattr(wrapper, MARK, original)
    return wrapper


def rebind(package: str, name: str, old: Any, new: Any) -> None:
    """Replace ``old`` by ``new`` wherever a loaded module of ``package`` holds it under ``name``."""
    for module_name, module in list(sys.modules.items()):
        if module is None or not (module_name == package or module_name.startswith(package + ".")):
            continue
        namespace = getattr(module, "__dict__", None)
        if isinstance(namespace, dict) and namespace.get(name) is old:
            namespace[name] = new


def wrap(
    owner: Any, name: str, make: Callable[[Any], Callable[..., Any]], *, rebind_under: str | None = None
) -> bool:
    """Put ``make(original)`` in place of ``owner.name`` (idempotent). False, changing nothing, when there is
    no callable by that name."""
    original = getattr(owner, name, None)
    if original_of(original) is not None:
        return True
    if not callable(original):
        return False
    static = vars(owner).get(name, _ABSENT) if hasattr(owner, "__dict__") else _ABSENT
    wrapper = mark(make(original), original)
    setattr(wrapper, _STATIC, static)
    as_classmethod = isinstance(inspect.getattr_static(owner, name, None), classmethod)
    setattr(owner, name, classmethod(wrapper) if as_classmethod else wrapper)
    if rebind_under:
        rebind(rebind_under, name, original, wrapper)
    return True


def undo(owner: Any, name: str, *, rebind_under: str | None = None) -> bool:
    """Put back what ``wrap`` replaced (idempotent); False when ``owner.name`` is not jitguard's."""
    current = getattr(owner, name, None)
    wrapper = getattr(current, "__func__", current)
    original = original_of(wrapper)
    if original is None:
        return False
    static = getattr(wrapper, _STATIC, original)
    if static is _ABSENT:
        delattr(owner, name)  # it was inherited: the base class's again
    else:
        setattr(owner, name, static)
    if rebind_under:
        rebind(rebind_under, name, wrapper, original)
    return True
