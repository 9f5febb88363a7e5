"""Install lines that work verbatim: jitguard is not on PyPI, so no page says `pip install jitguard`; and the
`test` extra holds everything the tests import (through its requirements' own requirements too)."""

from __future__ import annotations

import ast
import importlib.metadata as md
import re
import sys
from pathlib import Path

from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[3]
FROM_AN_INDEX = re.compile(r"pip install\s+(-U\s+)?['\"]?jitguard\b")
# Imported only from what the tests prepare themselves, never from the test venv: transformers inside an engine
# release, triton under JITGUARD_TRITON_ROOT (tests/triton_release.py; torch's CPU build brings none).
FROM_A_RELEASE = {"transformers", "triton"}


def test_no_page_installs_jitguard_from_an_index() -> None:
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    wrong = [
        f"{page.relative_to(ROOT)}:{n}: {line.strip()}"
        for page in pages
        for n, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1)
        if FROM_AN_INDEX.search(line) and "not on PyPI" not in line
    ]
    assert wrong == [], "jitguard is not on PyPI: install from the checkout (`pip install .`) or a wheel"


def _closure(requirements: list[str]) -> set[str]:
    """The distributions ``requirements`` install here, their own requirements included (extras not followed)."""
    seen: set[str] = set()
    todo = [Requirement(r).name for r in requirements]
    while todo:
        name = todo.pop().lower().replace("_", "-")
        if name in seen:
            continue
        seen.add(name)
        try:
            needs = md.requires(name) or []
        except md.PackageNotFoundError:
            continue
        for text in needs:
            req = Requirement(text)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                todo.append(req.name)
    return seen


def _array(key: str) -> list[str]:
    """The strings of pyproject.toml's ``key = [...]`` (tomllib is Python 3.11+; jitguard runs on 3.10)."""
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    body = re.search(rf"^{key} = \[(.*?)^\]", text, re.MULTILINE | re.DOTALL)
    assert body is not None, key
    return re.findall(r'^\s*"([^"]+)"', body.group(1), re.MULTILINE)


def test_the_test_extra_holds_everything_the_tests_import() -> None:
    provided = _closure(_array("test") + _array("dependencies"))
    ours = {p.stem for p in (ROOT / "tests").rglob("*.py")} | {p.name for p in (ROOT / "tests").rglob("*/")}
    ours |= {p.stem for p in (ROOT / "benchmarks").glob("*.py")} | {"jitguard"}
    imported: dict[str, str] = {}
    # The tests load benchmark modules too (benchmark_modules.load), and ask for some with importorskip.
    for path in [*(ROOT / "tests").rglob("*.py"), *(ROOT / "benchmarks").glob("*.py")]:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module]
            if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "importorskip" and node.args:
                first = node.args[0]
                names = (
                    [first.value] if isinstance(first, ast.Constant) and isinstance(first.value, str) else []
                )
            for name in names:
                top = name.split(".")[0]
                if top not in sys.stdlib_module_names and top not in ours:
                    imported.setdefault(top, str(path.relative_to(ROOT)))
    distributions = md.packages_distributions()
    missing = {
        module: where
        for module, where in imported.items()
        if module not in FROM_A_RELEASE
        and not {d.lower().replace("_", "-") for d in distributions.get(module, [])} & provided
    }
    assert missing == {}, f"add these to pyproject's test extra: {missing}"
