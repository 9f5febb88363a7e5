"""`jitguard warm save|restore|show|keygen`: an engine start's JIT caches, saved to the artifact store and restored
on another host (a Docker image build, a CI job, a new node) by command; the engine plugins do the same on their
own where a store is configured (``integrations.warm_start``, docs/fleet.md). ``keygen`` makes the key pair that
signs what a host saves (``fleet.signing``)."""

from __future__ import annotations

import argparse
from typing import Any

from jitguard.cli.parsing import needs_action, store_url
from jitguard.config import Settings
from jitguard.errors import EXIT_FAILURE, EXIT_OK, DirectoryInTheWay, UsageError

# The command's stages are imported where it runs them: `jitguard --help` imports every command module.

_LAYERS_HELP = (
    "which caches (default: all of vllm, sglang, triton, inductor, flashinfer, jitguard found here)"
)


def configure(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "warm",
        help="save an engine start's JIT caches to the store, or restore them on a new host",
        description=(
            "Every JIT cache an engine start fills (vLLM's and SGLang's compile caches, Triton, Inductor, "
            "FlashInfer's workspace, jitguard's CuTeDSL kernels), found where the engine looks for it, saved "
            "to the artifact store (one blob per file, named by its sha256) under a manifest for this "
            "software stack and GPU arch, and restored verified, without replacing any local file. The store "
            "is --store or JITGUARD_SHARE (file://, s3://, gs://). With JITGUARD_SIGNING_KEY set, what is "
            "saved is signed; with JITGUARD_TRUSTED_KEYS set, a snapshot not signed by one of those keys is "
            "refused."
        ),
    )
    actions = parser.add_subparsers(dest="warm_action", metavar="ACTION", parser_class=type(parser))
    for action, text in (
        ("save", "save this host's caches as the snapshot"),
        ("restore", "restore the snapshot of this stack and arch into this host's caches"),
        ("show", "say which caches are where here, and what the store holds for this stack"),
    ):
        sub = actions.add_parser(action, help=text, description=text)
        sub.add_argument(
            "--store",
            metavar="URL",
            type=store_url("--store"),
            help="the artifact store (default: JITGUARD_SHARE)",
        )
        sub.add_argument("--name", help="the snapshot's name (default: JITGUARD_WARM_NAME or 'default')")
        sub.add_argument(
            "--arch", help="the GPU arch as a compute capability, e.g. 9.0 (default: this host's GPU)"
        )
        sub.add_argument("--layers", help=_LAYERS_HELP + "; comma-separated")
        sub.add_argument("--json", action="store_true", help="print the versioned JSON envelope")
        sub.set_defaults(execute=execute)
    keygen = actions.add_parser(
        "keygen",
        help="make a key pair that signs what this host saves to the store",
        description=(
            "Write a new ed25519 private key to --out (mode 0600; an existing file is never replaced) and print "
            "its public key line on stdout. Point JITGUARD_SIGNING_KEY at the file on the hosts that save, "
            "and put the line into JITGUARD_TRUSTED_KEYS on every host that restores."
        ),
    )
    keygen.add_argument("--out", required=True, metavar="PATH", help="where to write the private key")
    keygen.set_defaults(execute=_keygen)
    parser.set_defaults(
        execute=needs_action(parser, "jitguard warm needs an action: save, restore, show or keygen")
    )


def execute(args: argparse.Namespace) -> int:
    import dataclasses

    from jitguard.facts.jit_caches import LAYER_NAMES
    from jitguard.fleet import warm_start
    from jitguard.fleet.signing import Trust
    from jitguard.fleet.snapshot import arch_of
    from jitguard.fleet.store_transport import describe_url

    settings = Settings.from_env()
    trust = Trust.from_settings(settings)  # trusted keys that cannot be used: exit 2, never "trust all"
    if args.warm_action == "save":
        trust.signer()  # likewise a signing key (mode, owner, format) before anything is uploaded
    changes: dict[str, Any] = {}
    if args.store:
        changes["share_url"] = args.store.strip()
    if args.name:
        if not all(c.isalnum() or c in "._-" for c in args.name) or args.name.startswith("."):
            raise UsageError(f"--name {args.name!r}: use letters, digits, '.', '_' and '-'")
        changes["warm_name"] = args.name
    settings = dataclasses.replace(settings, **changes)
    names = _layers(args.layers, LAYER_NAMES)
    try:
        arch = arch_of(args.arch) if args.arch else warm_start.host_arch(settings)
    except ValueError as exc:
        raise UsageError(f"--arch: {exc}") from None
    if arch is None:
        raise UsageError("no GPU here to tell the arch: give --arch (a compute capability, e.g. 9.0)")
    if not settings.share_url and args.warm_action != "show":
        raise UsageError("no artifact store: give --store URL or set JITGUARD_SHARE")
    caches = warm_start.engine_layers(settings, names)
    if args.warm_action == "restore":
        _refuse_a_file_in_the_way(caches)
    url = describe_url(settings.share_url) if settings.share_url else None
    payload: dict[str, Any] = {
        "action": args.warm_action,
        "store": url,
        "name": settings.warm_name,
        "arch": arch,
        "layers": [{"name": c.name, "root": str(c.root), "variable": c.variable} for c in caches],
    }
    if args.warm_action == "show":
        return _show(args, settings, arch, payload, trust)
    if args.warm_action == "save":
        outcome = warm_start.save_now(settings, arch=arch, only_if_new=False, layer_names=names)
    else:
        outcome = warm_start.restore_now(settings, arch=arch)
    payload.update(warm_start.outcome_json(outcome))
    ok = outcome.action in ("saved", "restored", "present", "unchanged")
    if args.json:
        from jitguard.cli.envelope import dumps

        print(dumps("warm", payload))
    else:
        for cache in caches:
            print(f"  {cache.describe()}")
        print(f"{args.warm_action}: {outcome.action}: {outcome.detail}")
        if outcome.signature is not None:
            print(f"signature: {outcome.signature.describe()}")
    if outcome.action == "miss":
        return EXIT_FAILURE
    return EXIT_OK if ok else EXIT_FAILURE


def _show(args: argparse.Namespace, settings: Any, arch: str, payload: dict[str, Any], trust: Any) -> int:
    from jitguard.fleet.artifact_store import ArtifactStore
    from jitguard.fleet.signing import SignatureRefused
    from jitguard.fleet.snapshot import SnapshotRejected, stack_key
    from jitguard.fleet.warm_transfer import WarmUnavailable, fetch_manifest

    stack = stack_key(arch)
    payload["stack"] = dict(stack.material)
    payload["signing"] = _signing(trust)
    stored: dict[str, Any] | None = None
    problem = None
    seal = None
    if settings.share_url:
        store = ArtifactStore(settings.share_url, timeout=settings.share_timeout, trust=trust)
        try:
            found = fetch_manifest(store, stack, settings.warm_name)
        except SignatureRefused as exc:
            problem, seal = str(exc), exc.seal
        except (WarmUnavailable, SnapshotRejected) as exc:
            problem = str(exc)
        else:
            if found is not None:
                snapshot = found[0]
                seal = snapshot.signature
                stored = {
                    "files": len(snapshot.files),
                    "bytes": snapshot.bytes,
                    "publisher": snapshot.publisher,
                    "created": snapshot.created,
                    "layers": sorted({f.layer for f in snapshot.files}),
                }
    payload["snapshot"] = stored
    payload["problem"] = problem
    payload["signature"] = seal.to_json() if seal is not None else None
    if args.json:
        from jitguard.cli.envelope import dumps

        print(dumps("warm", payload))
    else:
        for layer in payload["layers"]:
            origin = f"${layer['variable']}" if layer["variable"] else "default"
            print(f"  {layer['name']}: {layer['root']} ({origin})")
        print(f"stack: {stack.describe()}")
        if stored is not None:
            print(
                f"store: snapshot {settings.warm_name!r}: {stored['files']} files, {stored['bytes']} bytes, "
                f"saved by {stored['publisher'] or 'an unknown host'} ({', '.join(stored['layers'])})"
            )
        elif problem:
            print(f"store: cannot be used: {problem}")
        elif settings.share_url:
            print(f"store: no snapshot {settings.warm_name!r} for this stack yet")
        else:
            print("store: none configured (--store URL or JITGUARD_SHARE)")
        if seal is not None:
            print(f"signature: {seal.describe()}")
        print(f"this host: {_describe_signing(payload['signing'])}")
    return EXIT_FAILURE if problem else EXIT_OK


def _signing(trust: Any) -> dict[str, Any]:
    """How this host signs and which signers it accepts, for ``show`` (key ids only; never a private key)."""
    from jitguard.fleet.signing import SigningError

    signs_as = problem = None
    try:
        signer = trust.signer()
    except SigningError as exc:
        problem = str(exc)
    else:
        signs_as = signer.public.line if signer is not None else None
    return {"signs_as": signs_as, "signing_problem": problem, "trusted_signers": list(trust.trusted_ids)}


def _describe_signing(signing: dict[str, Any]) -> str:
    if signing["signs_as"]:
        signs = f"signs what it saves as {signing['signs_as']} (JITGUARD_SIGNING_KEY)"
    elif signing["signing_problem"]:
        signs = f"cannot sign: {signing['signing_problem']}"
    else:
        signs = "saves unsigned (no JITGUARD_SIGNING_KEY)"
    trusted = signing["trusted_signers"]
    if trusted:
        accepts = f"accepts only snapshots signed by {', '.join(trusted)} (JITGUARD_TRUSTED_KEYS)"
    else:
        accepts = "accepts any snapshot, signed or not (no JITGUARD_TRUSTED_KEYS: see docs/fleet.md)"
    return f"{signs}; {accepts}"


def _keygen(args: argparse.Namespace) -> int:
    import sys
    from pathlib import Path

    from jitguard.fleet.signing import generate

    public = generate(Path(args.out))
    print(public.line)  # stdout holds only the line: PUBLIC=$(jitguard warm keygen --out ...)
    sys.stderr.write(
        f"jitguard: wrote the private key {Path(args.out).expanduser()} (mode 0600; keep it on the hosts that "
        "save, and nowhere else).\n"
        "  On the hosts that save: point JITGUARD_SIGNING_KEY at that file.\n"
        f"  On every host that restores: put the line above (key {public.key_id}) into JITGUARD_TRUSTED_KEYS.\n"
    )
    return EXIT_OK


def _refuse_a_file_in_the_way(caches: Any) -> None:
    """A cache root that is a file, or sits under one, cannot be restored into: say which and what to move
    before the store is read (the restore would fail with a bare FileExistsError)."""
    from jitguard.facts.disk import probe_path
    from jitguard.findings.checks_disk import blocked_directory, in_the_way

    for cache in caches:
        entry = probe_path(cache.root)
        if in_the_way(entry):
            what = f"the {cache.name} cache"
            findings = blocked_directory(entry, f"{what} ({entry.path})", cache.variable)
            raise DirectoryInTheWay(what, entry.path, findings)


def _layers(text: str | None, known: tuple[str, ...]) -> tuple[str, ...]:
    if not text:
        return known
    names = tuple(part.strip() for part in text.split(",") if part.strip())
    unknown = [n for n in names if n not in known]
    if unknown or not names:
        raise UsageError(f"--layers {text!r}: known layers are {', '.join(known)}")
    return names
