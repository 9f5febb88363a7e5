"""The marks of tests that drive the real FlashInfer 0.6.6 (nvcc-era GDN) with the real nvcc and ninja."""

from __future__ import annotations

import importlib.metadata
import shutil

import pytest


def flashinfer_version() -> str | None:
    try:
        return importlib.metadata.version("flashinfer-python")
    except importlib.metadata.PackageNotFoundError:
        return None


NEEDS_FLASHINFER_066 = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not (flashinfer_version() or "").startswith("0.6.6"),
        reason=f"needs flashinfer-python 0.6.6 (nvcc-era GDN), found {flashinfer_version()}",
    ),
    pytest.mark.skipif(
        shutil.which("nvcc") is None or shutil.which("ninja") is None, reason="needs nvcc and ninja"
    ),
]
