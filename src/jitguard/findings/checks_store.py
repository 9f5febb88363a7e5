"""Checks of this host's relation to the fleet's artifact store: the caches a warm save would leave out
(another user owns or can write them), and whether what it takes from the store is checked against keys it
trusts (plain state of the signing settings: ``fleet.signing`` reads them, the CLI passes what it read)."""

from __future__ import annotations

from collections.abc import Mapping

from jitguard.facts.jit_caches import OWN_PLACE, VARIABLE, CacheLayer
from jitguard.findings.catalog import make
from jitguard.findings.model import Finding


def store_trust(
    store: str | None,
    trusted: tuple[str, ...],
    trust_problem: str | None,
    signs_as: str | None,
    signing_problem: str | None,
) -> list[Finding]:
    """``store``: the configured store (credentials redacted), None for none; ``trusted``: the key ids of
    JITGUARD_TRUSTED_KEYS; ``trust_problem`` / ``signing_problem``: why those keys or the signing key cannot be
    used; ``signs_as``: the key id this host signs with."""
    found: list[Finding] = []
    signing_problem = signing_problem.rstrip(".") if signing_problem else None
    trust_problem = trust_problem.rstrip(".") if trust_problem else None
    if signing_problem:
        found.append(make("signing-key-unusable", evidence=[signing_problem], error=signing_problem))
    if trust_problem:
        found.append(make("trusted-keys-unusable", evidence=[trust_problem], error=trust_problem))
    elif store and not trusted:
        signing = (
            f"This host signs what it saves (key {signs_as}); the readers need that key in "
            "JITGUARD_TRUSTED_KEYS."
            if signs_as
            else "This host does not sign what it saves either (no JITGUARD_SIGNING_KEY)."
        )
        found.append(
            make(
                "store-unsigned",
                evidence=[f"JITGUARD_SHARE={store}", "JITGUARD_TRUSTED_KEYS is not set"],
                store=store,
                signing=signing,
            )
        )
    return found


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
