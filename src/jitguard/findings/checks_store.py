"""Checks of what this host would publish to the fleet's store: caches another user owns or can write."""

from __future__ import annotations

from collections.abc import Mapping

from jitguard.facts.jit_caches import OWN_PLACE, VARIABLE, CacheLayer
from jitguard.findings.catalog import make
from jitguard.findings.model import Finding


def warm_caches(caches: tuple[CacheLayer, ...], untrusted: Mapping[str, tuple[str, ...]]) -> list[Finding]:
    """A ``warm-cache-untrusted`` finding for each layer of ``caches`` named in ``untrusted``."""
    found = []
    for cache in caches:
        reasons = untrusted.get(cache.name)
        if not reasons:
            continue
        found.append(
            make(
                "warm-cache-untrusted",
                evidence=[f"{cache.describe()}: {reason}" for reason in reasons],
                layer=cache.name,
                path=str(cache.root),
                reasons="; ".join(reasons),
                variable=VARIABLE[cache.name],
                suggested=OWN_PLACE[cache.name],
            )
        )
    return found
