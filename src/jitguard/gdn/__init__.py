"""The GDN (Gated DeltaNet) prefill op with one calling convention over FlashInfer, FLA (Triton) and PyTorch,
automatic fallback or strict mode, and an explainable decision. See docs/gdn.md.

``import jitguard.gdn`` imports neither torch nor any backend library; they load on first use.
Resolution lives in the module ``jitguard.gdn.resolve`` (``resolve(...)``, ``backend_status(...)``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__all__ = [
    "BackendStatus",
    "CallSpec",
    "Decision",
    "GdnInputError",
    "backend_status",
    "chunk_gated_delta_rule",
    "explain",
    "reset",
]

if TYPE_CHECKING:
    from jitguard.gdn.api import chunk_gated_delta_rule
    from jitguard.gdn.convention import CallSpec
    from jitguard.gdn.resolve import BackendStatus, Decision, backend_status, explain, reset
    from jitguard.gdn.validate import GdnInputError

_HOMES = {
    "chunk_gated_delta_rule": "jitguard.gdn.api",
    "CallSpec": "jitguard.gdn.convention",
    "BackendStatus": "jitguard.gdn.resolve",
    "Decision": "jitguard.gdn.resolve",
    "backend_status": "jitguard.gdn.resolve",
    "explain": "jitguard.gdn.resolve",
    "reset": "jitguard.gdn.resolve",
    "GdnInputError": "jitguard.gdn.validate",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'jitguard.gdn' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(home), name)
    globals()[name] = value  # later lookups skip __getattr__
    return value
