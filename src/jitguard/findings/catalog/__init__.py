"""The one catalog of finding codes. Pre-flight checks and the log classifier both build findings from it,
so a cause diagnosed before a build and after it carries the same code and fix.

Entries live in one module per area (``toolchain``, ``system``, ``flashinfer``, ``build``, ``gdn``, ``engine``,
``jitguard``, ``triton``, ``signing``); this module joins them and refuses duplicates.
"""

from __future__ import annotations

import string
from collections.abc import Iterable, Mapping
from typing import Any

from jitguard.findings.catalog import (
    build,
    engine,
    flashinfer,
    gdn,
    jitguard,
    store,
    system,
    toolchain,
    triton,
)
from jitguard.findings.model import CatalogEntry, Finding, Fix, Severity


def _join(groups: Iterable[tuple[CatalogEntry, ...]]) -> dict[str, CatalogEntry]:
    joined: dict[str, CatalogEntry] = {}
    for group in groups:
        for entry in group:
            if entry.code in joined:
                raise RuntimeError(f"duplicate finding code in catalog: {entry.code}")
            joined[entry.code] = entry
    return joined


CATALOG: dict[str, CatalogEntry] = _join(
    (
        toolchain.ENTRIES,
        system.ENTRIES,
        flashinfer.ENTRIES,
        build.ENTRIES,
        gdn.ENTRIES,
        engine.ENTRIES,
        jitguard.ENTRIES,
        triton.ENTRIES,
        store.ENTRIES,
    )
)


class _Lenient(dict[str, Any]):
    """Fills an unknown ``{field}`` with "(unknown)" instead of raising, and remembers it: a missing parameter
    never hides a finding, no template text reaches a user, and a fix that would show a hole is left out (see
    ``make``)."""

    def __init__(self, params: Mapping[str, Any]) -> None:
        super().__init__(params)
        self.missing: set[str] = set()

    def __missing__(self, key: str) -> str:
        self.missing.add(key)
        return "(unknown)"


def _fill(template: str, params: Mapping[str, Any]) -> tuple[str, bool]:
    """The filled template, and whether every field had a value."""
    values = _Lenient(params)
    text = string.Formatter().vformat(template, (), values)
    return text, not values.missing


def make(
    code: str,
    *,
    backend: str = "any",
    evidence: Iterable[str] = (),
    severity: Severity | None = None,
    **params: Any,
) -> Finding:
    """Build a finding from the catalog entry ``code``, filling its templates with ``params``.

    A fix whose text or command names a parameter the caller could not supply (e.g. a directory that holds a
    fix, when the finding comes from a log alone) is dropped: a command with a hole in it is no fix.
    """
    entry = CATALOG[code]
    fixes: list[Fix] = []
    for template in entry.fixes:
        text, text_ok = _fill(template.text, params)
        command, command_ok = _fill(template.command, params) if template.command else (None, True)
        if text_ok and command_ok:
            fixes.append(Fix(text, command))
    return Finding(
        code=code,
        severity=severity or entry.severity,
        title=_fill(entry.title, params)[0],
        cause=_fill(entry.cause, params)[0],
        evidence=tuple(str(e) for e in evidence),
        fixes=tuple(fixes),
        backend=backend,
    )


def markdown() -> str:
    """docs/findings.md, generated from the catalog (a test keeps the committed file in step)."""
    lines = [
        "# Finding codes",
        "",
        "Every finding jitguard reports carries one of these codes. Codes are stable: a released code never",
        "changes meaning. `error` blocks the backend it concerns; `warning` and `info` do not.",
        "Text in `{braces}` is filled in with the facts of your machine.",
        "",
        "Regenerate with `python -m jitguard.findings.catalog > docs/findings.md`.",
        "",
    ]
    by_area: dict[str, list[CatalogEntry]] = {}
    for entry in CATALOG.values():
        by_area.setdefault(entry.area, []).append(entry)
    for area in sorted(by_area):
        lines += [f"## {area}", ""]
        for entry in sorted(by_area[area], key=lambda e: e.code):
            lines += [f"### `{entry.code}` ({entry.severity})", "", f"**{entry.title}**", "", entry.cause, ""]
            if entry.fixes:
                lines.append("Fixes:")
                for fix in entry.fixes:
                    cmd = f" `{fix.command}`" if fix.command else ""
                    lines.append(f"- {fix.text}{cmd}")
                lines.append("")
    return "\n".join(lines).rstrip() + "\n"
