"""Findings about the fleet's artifact store: what a host would publish to it (caches that are not its own)
and whether what it takes from it is checked against keys it trusts (docs/fleet.md "Signed snapshots"). None
blocks a backend: an untrusted store or cache costs a compile, never a start."""

from __future__ import annotations

from jitguard.findings.model import CatalogEntry, FixTemplate

_AREA = "store"
_KEYGEN = FixTemplate(
    "Make a key pair on the host that saves (it prints the public key line):",
    "jitguard warm keygen --out ~/.config/jitguard/signing.key",
)

ENTRIES: tuple[CatalogEntry, ...] = (
    CatalogEntry(
        code="store-unsigned",
        severity="warning",
        title="the artifact store {store} is used without signatures",
        cause=(
            "JITGUARD_SHARE names a store and JITGUARD_TRUSTED_KEYS is not set, so this host restores every "
            "warm snapshot, module and CuTeDSL kernel the store holds, whoever wrote it: anyone who can write "
            "the store can run code here. {signing}"
        ),
        fixes=(
            _KEYGEN,
            FixTemplate(
                "Set JITGUARD_SIGNING_KEY to that file's path on the hosts that save, and JITGUARD_TRUSTED_KEYS "
                'to the public key line on every host that restores (docs/fleet.md, "Signed snapshots"); '
                "then check:",
                "jitguard warm show",
            ),
        ),
        area=_AREA,
    ),
    CatalogEntry(
        code="signing-key-unusable",
        severity="warning",
        title="the signing key (JITGUARD_SIGNING_KEY) cannot be used",
        cause="{error}. Until it is fixed, every save and publish from this host fails (nothing unsigned is sent).",
        fixes=(_KEYGEN,),
        area=_AREA,
    ),
    CatalogEntry(
        code="trusted-keys-unusable",
        severity="warning",
        title="the trusted keys (JITGUARD_TRUSTED_KEYS) cannot be read",
        cause=(
            "{error}. Until it is fixed, this host refuses everything the store holds (a list it cannot read is "
            'never taken for "trust everything"): every engine start compiles as without jitguard.'
        ),
        fixes=(
            FixTemplate(
                "Give the public key lines `jitguard warm keygen` printed, comma-separated, or the absolute path "
                "of a file of them; then check:",
                "jitguard warm show",
            ),
        ),
        area=_AREA,
    ),
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
