"""Fixtures shared by every test folder: a real stub ``libcuda`` built with gcc (this machine has no driver)."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Literal

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
    """An empty directory first on sys.path, for made-up distributions (tests/fake_dists.py)."""
    import importlib

    site = tmp_path / "site"
    site.mkdir()
    monkeypatch.syspath_prepend(str(site))
    importlib.invalidate_caches()
    return site
