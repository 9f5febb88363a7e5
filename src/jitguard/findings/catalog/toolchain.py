"""Finding codes of the 'toolchain' area. See docs/findings.md (generated)."""

from __future__ import annotations

from jitguard.findings.model import CatalogEntry, FixTemplate

ENTRIES: tuple[CatalogEntry, ...] = ()

_ = FixTemplate  # entries use it
