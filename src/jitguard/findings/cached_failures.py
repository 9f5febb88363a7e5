"""The finding a recorded failure becomes at the next start: one builder for the GDN op's records
(``gdn-cached-failure``) and the engine's FlashInfer modules (``flashinfer-cached-failure``), so both say
the same things (what failed before, when, where its log is, how to forget it)."""

from __future__ import annotations

import time
from collections.abc import Sequence

from jitguard.findings.catalog import make
from jitguard.findings.model import Finding


def cached_failure(
    code: str,
    *,
    backend: str,
    title: str,
    module: str,
    fingerprint: str,
    earlier: Sequence[Finding],
    log_path: str | None,
    created: float | None,
) -> Finding:
    """``code`` for a failure of ``module`` recorded under ``fingerprint`` with the findings ``earlier``."""
    codes = ", ".join(f.code for f in earlier) or "no findings recorded"
    when = time.strftime("%Y-%m-%d %H:%M", time.localtime(created)) if created else None
    evidence = [f"[{f.code}] {f.title}" for f in earlier]
    if log_path:
        evidence.append(f"log: {log_path}")
    return make(
        code,
        backend=backend,
        evidence=evidence,
        title=title,
        module=module,
        fingerprint=str(fingerprint),
        previous=f"[{codes}]" + (f" at {when}" if when else ""),
    )
