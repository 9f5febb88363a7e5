"""Where each FlashInfer module keeps the CuTeDSL kernels it compiles, read from its source (nothing imported).

Three routes, each treated differently: ``disk`` (FlashInfer's own disk cache, >= 0.6.18: left alone),
``memory`` (``custom_compile_cache.cached_compile``: persisted by ``cutedsl.persisting_compile``) and
``bare`` (``cute.compile`` with a cache of the module's own: no one persists them) (docs/cutedsl.md).
``persists_itself`` says whether the compile cache jitguard routes already writes to FlashInfer's disk cache.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

Route = Literal["disk", "memory", "bare"]
DISK: Route = "disk"
MEMORY: Route = "memory"
BARE: Route = "bare"

DISK_CACHE_MODULE = "flashinfer.jit.cute_dsl_core"
DISK_CACHE_NAMES = frozenset({"build_and_load_cute_dsl_kernel", "JitSpecCuteDsl"})
MEMORY_CACHE_MODULE = "flashinfer.gdn_kernels.delta_rule_dsl.custom_compile_cache"
MEMORY_CACHE_FUNCTION = "cached_compile"
# FlashInfer's vendored third-party Python (CCCL) and the two caches themselves are not kernel modules.
SKIPPED = ("flashinfer.data.", DISK_CACHE_MODULE, MEMORY_CACHE_MODULE)


@dataclass(frozen=True)
class ModuleRoute:
    module: str  # "flashinfer.gdn_kernels.blackwell.gdn_prefill"
    route: Route
    # what the module's name says ("sm90", "sm100+" for blackwell); () when it says none
    archs: tuple[str, ...]


def _callees(tree: ast.AST) -> Iterator[ast.expr]:
    """What each call in ``tree`` calls: ``f`` for ``f(...)``, ``m.f`` for ``m.f(...)``, ``cute.compile`` for
    ``cute.compile[options](...)``."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            yield node.func.value if isinstance(node.func, ast.Subscript) else node.func


def _called_names(tree: ast.AST) -> set[str]:
    """The names called in ``tree``: ``f(...)``, ``m.f(...)`` and ``cute.compile[...](...)`` each give ``f`` /
    ``compile``."""
    return {
        f.id if isinstance(f, ast.Name) else f.attr
        for f in _callees(tree)
        if isinstance(f, (ast.Name, ast.Attribute))
    }


def _imports_memory_cache(tree: ast.AST) -> bool:
    return any(
        isinstance(node, ast.ImportFrom)
        and (node.module or "").split(".")[-1] == MEMORY_CACHE_MODULE.split(".")[-1]
        and any(alias.name == MEMORY_CACHE_FUNCTION for alias in node.names)
        for node in ast.walk(tree)
    )


def route_of(tree: ast.AST) -> Route | None:
    """The route of a module's source; None when it compiles no CuTeDSL kernel."""
    called = _called_names(tree)
    if called & DISK_CACHE_NAMES:
        return DISK
    if MEMORY_CACHE_FUNCTION in called and _imports_memory_cache(tree):
        return MEMORY
    return BARE if _calls_cute_compile(tree) else None


def _calls_cute_compile(tree: ast.AST) -> bool:
    """``cute.compile(...)`` or ``cute.compile[options](...)`` anywhere in ``tree``."""
    return any(
        isinstance(f, ast.Attribute)
        and f.attr == "compile"
        and isinstance(f.value, ast.Name)
        and f.value.id == "cute"
        for f in _callees(tree)
    )


def archs_of(module: str) -> tuple[str, ...]:
    """The GPU archs a module's name says it targets: 'sm90', 'sm120'; 'sm100+' for FlashInfer's blackwell/."""
    found = [f"sm{m}" for m in re.findall(r"sm_?(\d{2,3})", module)]
    if "blackwell" in module.split("."):
        found.append("sm100+")
    return tuple(dict.fromkeys(found))


# Every route is spelled with one of these in the source: a file without any of them compiles no CuTeDSL
# kernel, and is not parsed (a FlashInfer release holds thousands of Python files).
_SPELLINGS = (
    b"cute.compile",
    MEMORY_CACHE_FUNCTION.encode(),
    *(n.encode() for n in sorted(DISK_CACHE_NAMES)),
)


def _parse(path: Path, *, only_if_named: bool = False) -> ast.Module | None:
    try:
        data = path.read_bytes()
        if only_if_named and not any(spelling in data for spelling in _SPELLINGS):
            return None
        return ast.parse(data, filename=str(path))
    except (OSError, SyntaxError, ValueError):
        return None


def routes(package_dir: Path) -> tuple[ModuleRoute, ...]:
    """Every module of the FlashInfer package at ``package_dir`` (the ``flashinfer`` directory) that compiles a
    CuTeDSL kernel, with its route, sorted by module name."""
    found = []
    root = package_dir.parent
    for path in sorted(package_dir.rglob("*.py")):
        module = ".".join(path.relative_to(root).with_suffix("").parts).removesuffix(".__init__")
        if module.startswith(SKIPPED):
            continue
        tree = _parse(path, only_if_named=True)
        route = route_of(tree) if tree is not None else None
        if route is not None:
            found.append(ModuleRoute(module, route, archs_of(module)))
    return tuple(found)


def has_disk_cache(package_dir: Path) -> bool:
    """Whether this FlashInfer has its own CuTeDSL disk cache (``JitSpecCuteDsl``)."""
    source = package_dir / "jit" / "cute_dsl_core.py"
    tree = _parse(source) if source.is_file() else None
    return tree is not None and any(
        isinstance(node, ast.ClassDef) and node.name == "JitSpecCuteDsl" for node in ast.walk(tree)
    )


def persists_itself(source: Path) -> bool:
    """Whether the module at ``source`` compiles through FlashInfer's disk cache (a ``cached_compile`` that
    FlashInfer made persistent: jitguard's kernel cache would then keep a second copy)."""
    tree = _parse(source)
    return tree is not None and bool(_called_names(tree) & DISK_CACHE_NAMES)
