"""One builder for a recorded failure's finding, whichever verdict reads it (the GDN op, the engine guard)."""

from __future__ import annotations

import time

from jitguard.findings.cached_failures import cached_failure
from jitguard.findings.catalog import make


def test_the_finding_names_what_failed_before_when_and_its_log() -> None:
    earlier = [make("link-missing-libcuda", backend="flashinfer", evidence=["cannot find -lcuda"])]
    created = time.mktime((2026, 12, 7, 9, 30, 0, 0, 0, -1))
    for code in ("gdn-cached-failure", "flashinfer-cached-failure"):
        finding = cached_failure(
            code,
            backend="flashinfer",
            title="FlashInfer GDN prefill",
            module="gdn_prefill_sm90",
            fingerprint="f" * 16,
            earlier=earlier,
            log_path="/var/log/build.log",
            created=created,
        )
        assert finding.code == code
        assert finding.evidence == (f"[link-missing-libcuda] {earlier[0].title}", "log: /var/log/build.log")
        assert "[link-missing-libcuda] at 2026-12-07 09:30" in finding.cause
        assert "f" * 16 in finding.cause
        assert any(
            "jitguard cache clear --module gdn_prefill_sm90 --yes" in (f.command or "") for f in finding.fixes
        )


def test_a_record_without_findings_or_time_still_says_so() -> None:
    finding = cached_failure(
        "gdn-cached-failure",
        backend="flashinfer",
        title="FlashInfer GDN prefill",
        module="gdn-prefill/flashinfer",
        fingerprint="0" * 16,
        earlier=[],
        log_path=None,
        created=None,
    )
    assert finding.evidence == ()
    assert "[no findings recorded]" in finding.cause and " at " not in finding.cause.split("[no findings")[1]
