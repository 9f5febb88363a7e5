"""jitguard: make JIT-compiled GPU kernels safe to load in LLM inference engines.

``import jitguard`` stays cheap: it imports neither torch nor flashinfer. Heavy parts load on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from jitguard.version import __version__

__all__ = ["BackendUnavailable", "JitguardError", "__version__", "install"]

if TYPE_CHECKING:
    from jitguard.errors import BackendUnavailable, JitguardError


def install() -> bool:
    """Route FlashInfer's nvcc JIT builds through jitguard's supervised runner (idempotent).

    Returns True when the hook is active after the call.
    """
    # lazy: every `import jitguard.<module>` runs this file first: it stays at the version
    from jitguard.integrations.flashinfer_hook import install as _install

    return _install()


def __getattr__(name: str) -> Any:
    if name in ("BackendUnavailable", "JitguardError"):
        # lazy: every `import jitguard.<module>` runs this file first: it stays at the version
        from jitguard import errors

        return getattr(errors, name)
    raise AttributeError(f"module 'jitguard' has no attribute {name!r}")
