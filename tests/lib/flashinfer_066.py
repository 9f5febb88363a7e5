"""The marks of tests that drive the real FlashInfer 0.6.6 (nvcc-era GDN) with the real nvcc and ninja, and the
scripts they run in a process of its own."""

from __future__ import annotations

import importlib.metadata
import shutil
import textwrap

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

# An engine's first use of FlashInfer's sampler, in a process with jitguard's hook installed (as the vLLM and
# SGLang plugins install it): FlashInfer's `sampling` module is built through the hook. Prints null when it
# builds and loads, else the error's type and finding codes.
SAMPLING_BUILD = textwrap.dedent(
    """
    import json
    import jitguard

    jitguard.install()
    from flashinfer.jit.sampling import gen_sampling_module

    try:
        gen_sampling_module().build_and_load()
        print(json.dumps(None))
    except Exception as exc:
        print(json.dumps({"type": type(exc).__name__, "codes": [f.code for f in getattr(exc, "findings", ())]}))
    """
)
