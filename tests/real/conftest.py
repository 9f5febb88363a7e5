"""Fixtures of the real-toolchain tests: an isolated jitguard cache for the test and the processes it starts."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture
def cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """An isolated jitguard cache (logs, slots, learned memory) for the test and its subprocesses."""
    path = tmp_path / "jitguard-cache"
    monkeypatch.setenv("JITGUARD_CACHE_DIR", str(path))
    for name in ("JITGUARD_MEMORY_BUDGET", "JITGUARD_JOB_MEMORY", "MAX_JOBS", "NINJA_STATUS"):
        monkeypatch.delenv(name, raising=False)
    yield path
