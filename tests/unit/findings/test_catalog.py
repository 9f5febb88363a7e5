"""The one catalog: unique stable codes, complete entries, and docs/findings.md in step with it."""

from __future__ import annotations

import re
from pathlib import Path

from jitguard.findings.catalog import CATALOG, make, markdown

DOCS = Path(__file__).resolve().parents[3] / "docs" / "findings.md"
KEBAB = re.compile(r"^[a-z0-9]+(-[a-z0-9]+)+$")


def test_docs_findings_md_is_generated_from_the_catalog() -> None:
    assert DOCS.read_text() == markdown(), (
        "docs/findings.md is out of date: run `python -m jitguard.findings.catalog > docs/findings.md`"
    )


def test_every_code_is_documented() -> None:
    text = DOCS.read_text()
    for code in CATALOG:
        assert f"`{code}`" in text


def test_codes_are_kebab_case_and_entries_complete() -> None:
    for code, entry in CATALOG.items():
        assert KEBAB.match(code), code
        assert entry.code == code
        assert entry.severity in ("error", "warning", "info")
        assert entry.title and entry.cause, code


def test_every_blocking_code_offers_a_fix() -> None:
    for code, entry in CATALOG.items():
        if entry.severity == "error":
            assert entry.fixes, f"{code} blocks a backend but offers no fix"


def test_make_fills_parameters_and_keeps_evidence() -> None:
    f = make("build-failed", backend="flashinfer", evidence=["line one"], log_path="/tmp/x.log", returncode=2)
    assert f.code == "build-failed" and f.backend == "flashinfer" and f.evidence == ("line one",)
    assert "/tmp/x.log" in " ".join([f.cause, *(x.render() for x in f.fixes)])


def test_no_template_text_reaches_a_user_whatever_facts_are_missing() -> None:
    """Every catalog entry rendered with no parameters at all: no ``{name}`` survives anywhere."""
    from jitguard.findings.catalog import CATALOG, make

    for code in CATALOG:
        finding = make(code)
        texts = [finding.title, finding.cause, *(f.render() for f in finding.fixes)]
        assert not [t for t in texts if "{" in t or "}" in t], (code, texts)
