"""The package is the data path (README "Layout"): each stage imports only from the stages before it.

Walks every module's imports with ``ast`` (function-level imports too: a lazy import is still a dependency;
only ``if TYPE_CHECKING:`` blocks are skipped, since annotations create no runtime arrow)."""

from __future__ import annotations

import ast
from pathlib import Path

import jitguard

PACKAGE = Path(jitguard.__file__).parent
# Lowest first. `config`, `errors`, `fileio` (trusted file I/O) and `redaction` are the ground every stage stands on; `report` holds pure renderers
# (below the stages with side effects, so the op's explain() and the engines' log lines can use them);
# `boundary` is where jitguard runs inside foreign code (the fail-safe, the one patch mechanism, the process's
# facts): right above `findings` (its fault line is a finding), below every stage that patches;
# `locks` (a lock with visible waits, where locks live) right above them, so every stage with side effects can take one;
# `ledger` (the start ledger: what each JIT layer compiled, jitguard's own phases) right above `boundary`, so every
# stage that compiles, loads or waits (fleet, flashinfer_jit, integrations) can count into it;
# `state` is the record the build stage writes; `fleet` shares what a host compiled (store, compiler cache, warm
# snapshots) and is called by the build stage and the engine boundary; the op (`gdn`) uses decision, state and the build stage;
# the engine integrations use the op; the CLI sits on top of everything.
STAGES = (
    ("config", "errors", "fileio", "redaction"),
    ("facts",),
    ("findings",),
    ("locks",),
    ("boundary",),
    ("ledger",),
    ("decision",),
    ("report",),
    ("state",),
    ("fleet",),
    ("supervise",),
    ("flashinfer_jit",),
    ("gdn",),
    ("integrations",),
    ("cli", "__main__"),
)
RANK = {name: rank for rank, names in enumerate(STAGES) for name in names}


def _stage(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[0] == "jitguard" else None


def _module_name(path: Path, package: Path) -> str:
    rel = path.relative_to(package.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(path: Path, package_dir: Path) -> list[tuple[int, str]]:
    module = _module_name(path, package_dir)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: list[tuple[int, str]] = []

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _is_type_checking(child):
                for rest in child.orelse:
                    visit(rest)
                continue
            if isinstance(child, ast.Import):
                found.extend((child.lineno, alias.name) for alias in child.names)
            elif isinstance(child, ast.ImportFrom):
                if child.level:
                    base = package.split(".")[: len(package.split(".")) - child.level + 1]
                    target = ".".join(base + ([child.module] if child.module else []))
                else:
                    target = child.module or ""
                found.append((child.lineno, target))
                if target == "jitguard":  # `from jitguard import facts` names a stage; `__version__` does not
                    found.extend(
                        (child.lineno, f"jitguard.{alias.name}")
                        for alias in child.names
                        if (package_dir / alias.name).is_dir() or (package_dir / f"{alias.name}.py").is_file()
                    )
            visit(child)

    visit(ast.parse(path.read_text(encoding="utf-8")))
    return found


def backward_imports(package_dir: Path = PACKAGE) -> list[str]:
    problems = []
    for path in sorted(package_dir.rglob("*.py")):
        source = _stage(_module_name(path, package_dir))
        if source is None:  # jitguard/__init__.py: the public surface, lazily reaching into every stage
            continue
        if source not in RANK:
            problems.append(f"{path.relative_to(package_dir)}: stage {source!r} is not placed in STAGES")
            continue
        for line, target in _imports(path, package_dir):
            stage = _stage(target)
            if stage is None or stage == source:
                continue
            if stage not in RANK or RANK[stage] > RANK[source]:
                problems.append(f"{path.relative_to(package_dir)}:{line}: {source} imports {target}")
    return problems


def test_every_stage_imports_only_from_the_stages_before_it() -> None:
    assert backward_imports() == []


def test_the_walker_sees_a_backward_import(tmp_path: Path) -> None:
    """The check itself can fail: a lazy import of a later stage inside a function is reported."""
    fake = tmp_path / "jitguard" / "facts"
    fake.mkdir(parents=True)
    (fake / "probe.py").write_text("def f():\n    from jitguard.cli import main\n    return main\n")
    (tmp_path / "jitguard" / "__init__.py").write_text("")
    assert backward_imports(tmp_path / "jitguard") == ["facts/probe.py:2: facts imports jitguard.cli"]


def test_type_checking_imports_are_not_arrows(tmp_path: Path) -> None:
    fake = tmp_path / "jitguard" / "facts"
    fake.mkdir(parents=True)
    (fake / "probe.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from jitguard.cli import main\n"
    )
    assert backward_imports(tmp_path / "jitguard") == []


# The file checks that decide trust, written once (docs/design.md "Rooms": fileio.py): a module that opens
# without following a link, compares an owner or looks at a link itself does it through fileio.
TRUST_CHECKS = frozenset({"O_NOFOLLOW", "st_uid", "lstat"})


def trust_checks_outside_fileio(package_dir: Path = PACKAGE) -> list[str]:
    problems = []
    for path in sorted(package_dir.rglob("*.py")):
        if path.relative_to(package_dir) == Path("fileio.py"):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            name = (
                node.attr
                if isinstance(node, ast.Attribute)
                else node.id
                if isinstance(node, ast.Name)
                else None
            )
            if name in TRUST_CHECKS:
                problems.append(
                    f"{path.relative_to(package_dir)}:{node.lineno}: {name} (use jitguard.fileio)"
                )
    return problems


def test_every_trust_check_goes_through_fileio() -> None:
    assert trust_checks_outside_fileio() == []


def test_the_trust_walker_sees_a_check_of_its_own(tmp_path: Path) -> None:
    fake = tmp_path / "jitguard" / "fleet"
    fake.mkdir(parents=True)
    (fake / "x.py").write_text("import os\n\ndef f(p):\n    return os.lstat(p).st_uid\n")
    assert trust_checks_outside_fileio(tmp_path / "jitguard") == [
        "fleet/x.py:4: st_uid (use jitguard.fileio)",
        "fleet/x.py:4: lstat (use jitguard.fileio)",
    ]
