"""Finding a module's source by name without importing it, namespace packages included."""

from __future__ import annotations

from pathlib import Path

from jitguard.facts.source_names import FOUND, MODULE_MISSING, NAME_NOT_FOUND, find_name, module_source


def _write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def test_a_module_under_namespace_packages_is_found(tmp_path: Path) -> None:
    """SGLang's ``sglang/srt`` has no ``__init__.py``: a namespace package inside a regular one."""
    _write(tmp_path, {"pkg/__init__.py": "", "pkg/ns/deep/mod.py": "def f(): pass\n"})
    assert module_source("pkg.ns.deep.mod", [str(tmp_path)]) == tmp_path / "pkg/ns/deep/mod.py"
    assert find_name("pkg.ns.deep.mod", "f", [str(tmp_path)]) == FOUND
    assert find_name("pkg.ns.deep.mod", "g", [str(tmp_path)]) == NAME_NOT_FOUND
    assert find_name("pkg.ns.other", "f", [str(tmp_path)]) == MODULE_MISSING


def test_namespace_portions_on_two_entries_are_searched_together(tmp_path: Path) -> None:
    _write(tmp_path, {"a/ns/one.py": "x = 1\n", "b/ns/two.py": "y = 2\n"})
    path = [str(tmp_path / "a"), str(tmp_path / "b")]
    assert find_name("ns.two", "y", path) == FOUND


def test_a_regular_package_wins_over_a_namespace_portion_and_a_module_has_no_submodules(
    tmp_path: Path,
) -> None:
    _write(
        tmp_path,
        {"a/pkg/mod.py": "x = 1\n", "b/pkg/__init__.py": "", "b/pkg/mod.py": "y = 2\n", "a/m.py": ""},
    )
    path = [str(tmp_path / "a"), str(tmp_path / "b")]
    assert module_source("pkg.mod", path) == tmp_path / "b/pkg/mod.py"
    assert module_source("m.sub", path) is None
    assert module_source("pkg", path) == tmp_path / "b/pkg/__init__.py"
