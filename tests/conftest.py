"""Fixtures shared by every test folder: a real stub ``libcuda`` built with gcc (this machine has no driver); how a
parallel run (``-n auto``) spreads the tests."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

import pytest

StubLayout = Literal["stubs", "driver", "versioned-only"]

# The two driver entry points a link stub needs; enough for the linker, never called.
STUB_LIBCUDA_SOURCE = """
int cuInit(unsigned int flags) { (void)flags; return 0; }
int cuDriverGetVersion(int *version) { *version = 13000; return 0; }
"""


def build_stub_libcuda(directory: Path, *, layout: StubLayout = "stubs") -> Path:
    """Build a real shared library with soname ``libcuda.so.1`` into ``directory`` (created if needed) and
    return ``directory``. ``layout``: 'stubs' -> a file ``libcuda.so`` (as the CUDA toolkit's ``stubs/``
    ships it); 'driver' -> ``libcuda.so.1`` and the symlink ``libcuda.so`` to it (a driver or conda install);
    'versioned-only' -> ``libcuda.so.1`` alone (a driver install without the development symlink)."""
    directory.mkdir(parents=True, exist_ok=True)
    source = directory / "stub_cuda.c"
    source.write_text(STUB_LIBCUDA_SOURCE)
    library = directory / ("libcuda.so" if layout == "stubs" else "libcuda.so.1")
    try:
        proc = subprocess.run(
            ["gcc", "-shared", "-fPIC", "-Wl,-soname,libcuda.so.1", str(source), "-o", str(library)],
            capture_output=True,
            text=True,
            timeout=60,
        )
    finally:
        source.unlink()
    if proc.returncode != 0:
        pytest.fail(f"gcc could not build the stub libcuda in {directory}:\n{proc.stderr}")
    if layout == "driver":
        (directory / "libcuda.so").symlink_to("libcuda.so.1")
    return directory


@pytest.fixture
def stub_libcuda_dir(tmp_path: Path) -> Path:
    """A directory holding a real stub ``libcuda.so``, as the CUDA toolkit's stubs directory provides."""
    return build_stub_libcuda(tmp_path / "stubs")


@pytest.fixture(scope="session")
def stub_libcuda_builder() -> Callable[..., Path]:
    """``build_stub_libcuda`` for tests and wider-scoped fixtures that need a stub elsewhere or in another
    layout (a test module cannot import it: every test folder's conftest is named ``conftest``)."""
    return build_stub_libcuda


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty directory first on sys.path, for made-up distributions (tests/lib/fake_dists.py)."""
    import importlib

    site = tmp_path / "site"
    site.mkdir()
    monkeypatch.syspath_prepend(str(site))
    importlib.invalidate_caches()
    return site


# ---- parallel runs (pytest-xdist: `python -m pytest -n auto`, the README's test command) ----------------------
MAX_AUTO_WORKERS = 4  # each worker may start an engine release's import (1-3 GB) or a real build at a time


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """``-n auto``: one worker per CPU this process may use, at most MAX_AUTO_WORKERS."""
    return max(1, min(MAX_AUTO_WORKERS, len(os.sched_getaffinity(0))))


@pytest.hookimpl(optionalhook=True, tryfirst=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """``-n`` with xdist's default ``--dist load``: whole modules go to a worker (``loadscope``), so a module's
    engine runs and preparations (module-scoped fixtures) happen once rather than once per worker. Another
    ``--dist`` is left to xdist."""
    if config.getoption("dist") != "load":
        return None
    from xdist.scheduler import LoadScopeScheduling

    return LoadScopeScheduling(config, log)
