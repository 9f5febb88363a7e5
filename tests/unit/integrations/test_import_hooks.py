"""The post-import hook, on real modules written to a temp dir on sys.path."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

from jitguard.integrations.import_hooks import PostImportHook

WATCHED = "jitguard_hook_watched"
UNWATCHED = "jitguard_hook_unwatched"


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    for name in (WATCHED, UNWATCHED):
        (tmp_path / f"{name}.py").write_text(f"NAME = {name!r}\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path
    for name in (WATCHED, UNWATCHED):
        sys.modules.pop(name, None)


@pytest.fixture
def seen() -> list[ModuleType]:
    return []


@pytest.fixture
def hook(seen: list[ModuleType]) -> Iterator[PostImportHook]:
    hook = PostImportHook([WATCHED], seen.append)
    yield hook
    hook.uninstall()


def test_a_watched_module_imported_after_install_is_passed_to_the_callback_once(
    site: Path, hook: PostImportHook, seen: list[ModuleType]
) -> None:
    hook.install()
    module = importlib.import_module(WATCHED)
    importlib.import_module(WATCHED)
    assert seen == [module]


def test_the_callback_sees_the_module_after_its_code_has_run(site: Path) -> None:
    names: list[str] = []
    hook = PostImportHook([WATCHED], lambda module: names.append(module.NAME))
    hook.install()
    try:
        importlib.import_module(WATCHED)
    finally:
        hook.uninstall()
    assert names == [WATCHED]


def test_unwatched_modules_are_left_to_the_other_finders(
    site: Path, hook: PostImportHook, seen: list[ModuleType]
) -> None:
    hook.install()
    module = importlib.import_module(UNWATCHED)
    assert seen == []
    assert hook.find_spec(UNWATCHED, None) is None
    assert type(module.__loader__).__name__ == "SourceFileLoader"


def test_uninstall_takes_the_hook_off_and_later_imports_are_not_seen(
    site: Path, hook: PostImportHook, seen: list[ModuleType]
) -> None:
    hook.install()
    hook.uninstall()
    assert hook not in sys.meta_path
    importlib.import_module(WATCHED)
    assert seen == []


def test_install_twice_puts_one_finder_first_on_the_meta_path(hook: PostImportHook) -> None:
    hook.install()
    hook.install()
    assert sys.meta_path[0] is hook
    assert sum(finder is hook for finder in sys.meta_path) == 1


def test_two_hooks_watching_one_module_both_see_it(site: Path, seen: list[ModuleType]) -> None:
    other: list[ModuleType] = []
    first = PostImportHook([WATCHED], seen.append)
    second = PostImportHook([WATCHED], other.append)
    first.install()
    second.install()
    try:
        module = importlib.import_module(WATCHED)
    finally:
        second.uninstall()
        first.uninstall()
    assert seen == [module]
    assert other == [module]
