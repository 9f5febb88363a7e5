"""The GDN (Gated DeltaNet) prefill op with one calling convention over FlashInfer, FLA (Triton) and PyTorch,
automatic fallback or strict mode, and an explainable decision. See docs/gdn.md.

``import jitguard.gdn`` imports neither torch nor any backend library; they load on first use.
The decision is ``jitguard.decision.gdn_resolution`` (pure); the dispatcher that acts on it is ``jitguard.gdn.dispatch``
(``resolve(...)``, ``backend_status(...)``, ``explain()``).
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
    from jitguard.decision.gdn_resolution import BackendStatus, CallSpec, Decision
    from jitguard.gdn.api import chunk_gated_delta_rule
    from jitguard.gdn.dispatch import backend_status, explain, reset
    from jitguard.gdn.validate import GdnInputError

_HOMES = {
    "chunk_gated_delta_rule": "jitguard.gdn.api",
    "CallSpec": "jitguard.decision.gdn_resolution",
    "BackendStatus": "jitguard.decision.gdn_resolution",
    "Decision": "jitguard.decision.gdn_resolution",
    "backend_status": "jitguard.gdn.dispatch",
    "explain": "jitguard.gdn.dispatch",
    "reset": "jitguard.gdn.dispatch",
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
