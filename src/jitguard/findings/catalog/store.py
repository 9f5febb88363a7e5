"""Findings about the fleet's artifact store and what a host would publish to it or restore from it."""

from __future__ import annotations

from jitguard.findings.model import CatalogEntry, FixTemplate

_AREA = "store"

ENTRIES = (
    CatalogEntry(
        code="warm-cache-untrusted",
        severity="warning",
        title="The {layer} cache {path} is left out of every warm save and restore",
        cause=(
            "{path} is not this user's alone: {reasons}. A warm save publishes only caches that this user (or "
            "root) owns and no one else can write, like ssh with ~/.ssh: another user could have planted code "
            "there that every host restoring the snapshot would run. A restore does not write into it either."
        ),
        fixes=(
            FixTemplate("Give the {layer} cache a directory of your own:", "export {variable}={suggested}"),
            FixTemplate("If the directory is yours, make it private:", "chmod -R go-w {path}"),
        ),
        area=_AREA,
    ),
)
