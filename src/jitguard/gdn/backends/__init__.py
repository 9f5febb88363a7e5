"""The GDN prefill backends. Each module converts jitguard's convention to and from one implementation and
exposes the same small surface (``GdnBackend``); importing a backend module imports neither torch nor the
library it wraps: that happens in ``load()``, on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from jitguard.decision.gdn_resolution import CallSpec
    from jitguard.findings.model import Finding
    from jitguard.gdn.call import GdnCall


class GdnBackend(Protocol):
    """What resolution needs from a backend (a module or an object)."""

    NAME: str
    TITLE: str
    MODULE: str | None  # failure-cache module name; None = nothing to build, never cached as failed

    def input_findings(self, spec: CallSpec) -> list[Finding]:
        """Why this backend cannot take such a call (empty when it can). Pure and cheap."""
        ...

    def load(self) -> None:
        """Import, build and load whatever the backend needs (idempotent). Raises on failure."""
        ...

    # Optional: ``prepare(call)``, run after ``load()`` on a kind of call's first use (still the load stage):
    # build what that kind of call needs (FlashInfer's nvcc era builds per instance).

    def run(self, call: GdnCall) -> tuple[Any, Any]:
        """Run one validated call in jitguard's convention; returns ``(o, final_state or None)``."""
        ...


def default_backends() -> list[GdnBackend]:
    # lazy: `import jitguard.gdn.backends.<name>` runs this file first: not all three
    from jitguard.gdn.backends import flashinfer, torch, triton

    return [flashinfer, triton, torch]
