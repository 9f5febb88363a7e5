"""Whether an installed package still defines a function or method by name, read from its source without
importing it.

An engine plugin finds its patch sites by module and name; when a release renames or removes one, the import
hook never fires and nothing would be said. ``find_name`` answers, per site, whether the module is there and
whether it defines the name, walking the import path (``importlib.machinery.PathFinder``: no parent package's
``__init__`` runs) and reading the module's source with ``ast``.
"""

from __future__ import annotations

import ast
from collections.abc import Sequence
from dataclasses import dataclass
from importlib.machinery import PathFinder
from pathlib import Path
from typing import Literal

SiteState = Literal["found", "module missing", "name not found"]
FOUND: SiteState = "found"
MODULE_MISSING: SiteState = "module missing"
NAME_NOT_FOUND: SiteState = "name not found"


def module_source(module: str, path: Sequence[str] | None = None) -> Path | None:
    """The source file of ``module`` ('pkg.sub.mod') on ``path`` (default: sys.path), or None when it is not
    there; imports nothing."""
    search: Sequence[str] | None = list(path) if path is not None else None
    parts = module.split(".")
    spec = None
    for depth in range(1, len(parts) + 1):
        try:
            spec = PathFinder.find_spec(".".join(parts[:depth]), search)
        except (ImportError, ValueError):
            return None
        if spec is None:
            return None
        if depth < len(parts):
            if not spec.submodule_search_locations:
                return None
            search = list(spec.submodule_search_locations)
    origin = spec.origin if spec is not None else None
    return Path(origin) if origin and origin.endswith(".py") else None


@dataclass(frozen=True)
class ModuleNames:
    """What a module's source defines at module level (inside ``if`` and ``try`` too)."""

    members: dict[str, set[str]]  # each name; a class's maps to the names its body defines
    bases: dict[str, list[str]]  # each class's bases, as written (simple names only)
    imported: dict[str, tuple[str, str]]  # a name bound by `from M import N [as name]`: (M, N)


def defined_names(tree: ast.Module, module: str = "") -> ModuleNames:
    """The names ``tree`` (the source of ``module``, for relative imports) defines."""
    names = ModuleNames({}, {}, {})

    def members(body: Sequence[ast.stmt]) -> set[str]:
        found: set[str] = set()
        for stmt in body:
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                found.add(stmt.name)
            elif isinstance(stmt, (ast.Assign, ast.AnnAssign)):
                targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
                found.update(t.id for t in targets if isinstance(t, ast.Name))
        return found

    def visit(body: Sequence[ast.stmt]) -> None:
        for stmt in body:
            if isinstance(stmt, ast.ClassDef):
                names.members.setdefault(stmt.name, set()).update(members(stmt.body))
                names.bases[stmt.name] = [b.id for b in stmt.bases if isinstance(b, ast.Name)]
            elif isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
                names.members.setdefault(stmt.name, set())
            elif isinstance(stmt, (ast.Assign, ast.AnnAssign)):
                targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
                for target in targets:
                    if isinstance(target, ast.Name):
                        names.members.setdefault(target.id, set())
            elif isinstance(stmt, ast.Import):
                for alias in stmt.names:
                    names.members.setdefault((alias.asname or alias.name).split(".")[0], set())
            elif isinstance(stmt, ast.ImportFrom):
                source = _absolute(module, stmt.level, stmt.module)
                for alias in stmt.names:
                    names.members.setdefault(alias.asname or alias.name, set())
                    if source:
                        names.imported[alias.asname or alias.name] = (source, alias.name)
            elif isinstance(stmt, ast.If):
                visit(stmt.body)
                visit(stmt.orelse)
            elif isinstance(stmt, ast.Try):
                for block in (stmt.body, stmt.orelse, stmt.finalbody, *(h.body for h in stmt.handlers)):
                    visit(block)

    visit(tree.body)
    return names


def _absolute(module: str, level: int, name: str | None) -> str | None:
    if not level:
        return name
    parts = module.split(".")
    if level > len(parts):
        return None
    base = parts[: len(parts) - level]
    return ".".join([*base, name] if name else base) or None


def _read(module: str, path: Sequence[str] | None) -> ModuleNames | None:
    source = module_source(module, path)
    if source is None:
        return None
    try:
        return defined_names(ast.parse(source.read_bytes(), filename=str(source)), module)
    except (OSError, SyntaxError, ValueError):
        return ModuleNames({}, {}, {})


def _has_member(
    names: ModuleNames, cls: str, member: str, path: Sequence[str] | None, depth: int = 0
) -> bool:
    """Whether class ``cls`` defines ``member`` itself or through a base (followed into the modules it is
    imported from, a few levels deep)."""
    if depth > _MAX_DEPTH:
        return False
    if cls in names.imported and cls not in names.bases:
        module, name = names.imported[cls]
        other = _read(module, path)
        return other is not None and _has_member(other, name, member, path, depth + 1)
    if member in names.members.get(cls, set()):
        return True
    return any(_has_member(names, base, member, path, depth + 1) for base in names.bases.get(cls, []))


_MAX_DEPTH = 6


def find_name(module: str, target: str, path: Sequence[str] | None = None) -> SiteState:
    """Whether ``module`` on ``path`` defines ``target``: a name ('f'), a method ('Class.method', inherited
    too), or several names joined by ', ' (all of them)."""
    names = _read(module, path)
    if names is None:
        return MODULE_MISSING
    for name in (n.strip() for n in target.split(",")):
        owner, _, member = name.partition(".")
        if owner not in names.members or (member and not _has_member(names, owner, member, path)):
            return NAME_NOT_FOUND
    return FOUND
