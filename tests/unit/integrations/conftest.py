from __future__ import annotations

import importlib
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from jitguard.integrations import vllm as plugin


@pytest.fixture
def stand_in(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A temp dir on ``sys.path`` for a stand-in ``vllm`` (tests/lib/stand_in_vllm.py); afterwards the plugin is
    unregistered and every ``vllm`` module forgotten."""
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delenv("JITGUARD_DISABLE", raising=False)
    yield tmp_path
    plugin.unregister()
    for name in [n for n in sys.modules if n == "vllm" or n.startswith("vllm.")]:
        del sys.modules[name]
    importlib.invalidate_caches()
