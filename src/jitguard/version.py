"""jitguard's version, on the ground floor: every stage that records or prints it reads it here, so none has to
import the package root (which sits above every stage)."""

from __future__ import annotations

__version__ = "0.1.0"
