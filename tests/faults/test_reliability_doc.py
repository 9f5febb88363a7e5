"""docs/reliability.md names a test for every fault: each one it names exists, and every fault test is named."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "reliability.md"


def _named_tests() -> set[tuple[str, str]]:
    """(file, test) pairs from the matrix; ``::name`` after a comma keeps the previous file."""
    found = set()
    for row in DOC.read_text().splitlines():
        if not row.startswith("|"):
            continue
        current = None
        for path, name in re.findall(r"`(?:([\w/]+\.py))?::(\w+)`", row):
            if path:
                current = path if "/" in path else f"tests/faults/{path}"
            if current and name:
                found.add((current, name))
        for path in re.findall(r"`(tests/[\w/]+\.py)`", row):
            found.add((path, ""))
    return found


def _tests_in(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    return {n.name for n in tree.body if isinstance(n, ast.FunctionDef) and n.name.startswith("test_")}


def test_every_test_the_matrix_names_exists() -> None:
    for path, name in _named_tests():
        assert (ROOT / path).is_file(), path
        if name:
            assert name in _tests_in(ROOT / path), f"{path}::{name}"


def test_every_fault_test_is_in_the_matrix() -> None:
    named = {name for path, name in _named_tests() if path.startswith("tests/faults/")}
    for path in sorted((ROOT / "tests" / "faults").glob("test_*.py")):
        if path.name == Path(__file__).name:
            continue
        missing = _tests_in(path) - named
        assert not missing, f"{path.name}: {sorted(missing)} not in docs/reliability.md"
