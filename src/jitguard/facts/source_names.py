"""Whether an installed package still defines a function or method by name, read from its source without
importing it.

An engine plugin finds its patch sites by module and name; when a release renames or removes one, the import
hook never fires and nothing would be said. ``find_name`` answers, per site, whether the module is there and
whether it defines the name, walking the import path (no parent package's ``__init__`` runs; namespace
packages included) and reading the module's source with ``ast``.
"""

from __future__ import annotations

import ast
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

SiteState = Literal["found", "module missing", "name not found"]
FOUND: SiteState = "found"
MODULE_MISSING: SiteState = "module missing"
NAME_NOT_FOUND: SiteState = "name not found"


def module_source(module: str, path: Sequence[str] | None = None) -> Path | None:
    """The source file of ``module`` ('pkg.sub.mod') on ``path`` (default: sys.path), or None when it is not
    there; imports nothing. Walks the directories as the import system does for source files: in each entry
    a package directory (with ``__init__.py``) first, then ``name.py``; directories without ``__init__.py``
    are namespace portions, searched together (SGLang's ``sglang.srt`` is one)."""
    search = [str(p) for p in (path if path is not None else sys.path)]
    parts = module.split(".")
    for depth, part in enumerate(parts):
        last = depth == len(parts) - 1
        found, portions = None, []
        for entry in search:
            base = Path(entry or os.curdir) / part
            if (base / "__init__.py").is_file():
                found = base / "__init__.py"
            elif base.with_suffix(".py").is_file():
                found = base.with_suffix(".py")
            elif base.is_dir():
                portions.append(str(base))
            if found is not None:
                break
        if last:
            return found
        if found is not None and found.name != "__init__.py":
            return None  # a module, not a package: it has no submodules
        search = [str(found.parent)] if found is not None else portions
        if not search:
            return None
    return None


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
