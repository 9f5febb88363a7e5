"""Assertions about findings shared by the checks' tests."""

from __future__ import annotations

import re

from jitguard.findings.model import Finding


def codes(found: list[Finding]) -> list[str]:
    return sorted(f.code for f in found)


def only(found: list[Finding], code: str) -> Finding:
    """The one finding with ``code`` (fails when there is none or more than one)."""
    matching = [f for f in found if f.code == code]
    assert len(matching) == 1, codes(found)
    return matching[0]


def assert_filled(finding: Finding) -> None:
    """Every {param} of the catalog templates was filled in."""
    texts = (
        [finding.title, finding.cause]
        + [f.text for f in finding.fixes]
        + [f.command or "" for f in finding.fixes]
    )
    assert [t for t in texts if re.search(r"\{[a-z_]+\}", t)] == [], finding.code
