"""Warm start: an engine on a new host restores the fleet's snapshot of its JIT caches before it compiles
anything, and an engine that is ready saves what it compiled (``fleet.warm_transfer`` does the work).

``restore_once`` runs in every engine process at plugin registration, when a store is configured
(``JITGUARD_SHARE``) and ``JITGUARD_WARM`` is not ``off``. One process per host restores: it holds the host's
warm lock while it does (the others wait visibly, naming it, as ranks wait on a build), all of it under one
deadline (``JITGUARD_SHARE_TIMEOUT``, lock wait included). Only a complete restore writes a marker naming the
manifest; a process that finds the marker for the manifest in the store, and every file it names in place, has
nothing to do (wiped caches are restored again). ``save_when_ready`` runs once an engine is ready (vLLM: ``EngineCore.__init__`` returned, so torch.compile,
the profile run and CUDA graph capture are done) where ``JITGUARD_SHARE_PUBLISH=1``: in a background thread,
only when the caches hold files the store's snapshot lacks, and only one process per host at a time.

Never worse than without jitguard: a store that fails, hangs or holds something that does not check out is one
warning (logger ``jitguard.warm``) and the engine compiles as it would have.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jitguard import fileio
from jitguard.config import Settings, format_bytes
from jitguard.errors import LockTimeout, LockUnavailable
from jitguard.facts import gpu
from jitguard.facts.jit_caches import LAYER_NAMES, CacheLayer, layers
from jitguard.fleet.artifact_store import ArtifactStore
from jitguard.fleet.signing import Seal, SignatureRefused, SigningError, Trust
from jitguard.fleet.snapshot import SnapshotRejected, StackKey, arch_of, layer_root, listing, stack_key
from jitguard.fleet.store_transport import describe_url
from jitguard.fleet.warm_transfer import (
    NothingToSave,
    Restored,
    Saved,
    WarmUnavailable,
    fetch_manifest,
    restore,
    save,
)
from jitguard.ledger import tally
from jitguard.locks.lock_dir import lock_dir
from jitguard.locks.visible_lock import ModuleLock, ensure_visible_logging

log = logging.getLogger("jitguard.warm")
ENGINE_LAYERS: dict[str, tuple[str, ...]] = {
    "vllm": ("vllm", "triton", "inductor", "flashinfer", "deep_gemm", "tilelang", "jitguard"),
    "sglang": ("sglang", "triton", "inductor", "flashinfer", "deep_gemm", "tilelang", "jitguard"),
}
MARKER_SCHEMA = "jitguard.warm-restored/1"
_tried: dict[str, Outcome] = {}  # per process: store|name|arch -> what the one attempt did
_lock = threading.Lock()


@dataclass(frozen=True)
class Outcome:
    """What one warm operation did: ``action`` restored | partial (some files did not land: integrity
    events, refusals, a full disk; said in ``detail``) | present (the marker says so) | saved | unchanged |
    miss (no snapshot for this stack) | skipped (why in ``detail``) | refused (not signed by a key this host
    trusts; ``signature`` says how) | failed."""

    action: str
    detail: str = ""
    restored: Restored | None = None
    saved: Saved | None = None
    waited: float = 0.0
    signature: Seal | None = None  # the store's manifest's, where one was read
    layers: tuple[str, ...] = ()  # the cache layers of the snapshot restored or found here


def host_arch(settings: Settings) -> str | None:
    """This host's GPU arch (``sm_90``): JITGUARD_WARM_ARCH, else the first visible GPU's (NVML; CUDA is not
    initialised). None when there is no GPU to ask."""
    if settings.warm_arch:
        return arch_of(settings.warm_arch)

    capabilities = gpu.probe(os.environ).capabilities
    return arch_of(capabilities[0]) if capabilities else None


def engine_layers(settings: Settings, names: tuple[str, ...] = LAYER_NAMES) -> tuple[CacheLayer, ...]:
    return layers(os.environ, settings.cache_dir, names)


def _this_stack(settings: Settings, arch: str | None) -> StackKey | Outcome:
    """This host's stack for ``arch`` (default: its GPU's), or why a warm operation is skipped here."""
    if not settings.share_url:
        return Outcome("skipped", "no store configured (JITGUARD_SHARE)")
    arch = arch or host_arch(settings)
    if arch is None:
        return Outcome("skipped", "no GPU to tell the arch (set JITGUARD_WARM_ARCH, e.g. 9.0)")
    return stack_key(arch)


def _key_text(stack: StackKey, name: str) -> str:
    return f"{stack.digest}-{stack.arch}-{name}"


def _marker(settings: Settings, stack: StackKey, name: str) -> Path:
    return settings.cache_dir / "warm" / f"restored-{_key_text(stack, name)}.json"


def restore_once(settings: Settings, *, engine: str = "vllm", arch: str | None = None) -> Outcome:
    """Restore this stack's snapshot on this host unless a process here did already (see the module
    docstring). Tried once per process and store, whatever came of it: an engine registers its plugins
    more than once, and a store that failed must not cost its timeout (and its warning) again. Never raises."""
    if settings.disabled or settings.warm == "off":
        return Outcome("skipped", "warm start is off (JITGUARD_WARM=off or JITGUARD_DISABLE=1)")
    attempt = f"{settings.share_url}|{settings.warm_name}|{arch or settings.warm_arch}"
    with _lock:
        earlier = _tried.get(attempt)
        if earlier is not None:
            return Outcome(earlier.action, f"tried earlier in this process: {earlier.detail}")
    started = time.monotonic()
    try:
        stack = _this_stack(settings, arch)
        outcome = stack if isinstance(stack, Outcome) else _restore_locked(settings, stack, engine)
        if outcome.action == "skipped" and settings.share_url is None:
            outcome = baked(settings, arch) or outcome
    except Exception as exc:  # a fault of jitguard's own is still only a cold start
        log.warning(
            "jitguard: warm start skipped: %s: %s; the engine compiles as without jitguard",
            type(exc).__name__,
            exc,
        )
        outcome = Outcome("failed", f"{type(exc).__name__}: {exc}")
    tally.phase("lock_waits", outcome.waited)
    tally.phase("restore", time.monotonic() - started - outcome.waited)
    with _lock:
        _tried[attempt] = outcome
    return outcome


def baked(settings: Settings, arch: str | None = None) -> Outcome | None:
    """The snapshot a ``jitguard warm restore`` put on this host before the engine started (a Docker image
    layer: no store at serving time), as its marker names it; None when there is none for this stack. No GPU
    is asked: the marker's name holds the stack digest (which no arch changes) and the arch."""
    markers = [p for p in fileio.json_files(settings.cache_dir / "warm") if p.name.startswith("restored-")]
    if not markers:
        return None
    digest = stack_key("sm_90").digest  # the arch is not part of the digest
    wanted = arch or (arch_of(settings.warm_arch) if settings.warm_arch else None)  # ``arch``: sm_90 already
    for path in markers:
        middle = path.name[len("restored-") : -len(".json")]
        if not middle.startswith(f"{digest}-") or not middle.endswith(f"-{settings.warm_name}"):
            continue
        if wanted is not None and middle != f"{digest}-{wanted}-{settings.warm_name}":
            continue
        seen = fileio.read_json(path, root=settings.cache_dir)
        if seen is not None and seen.get("schema") == MARKER_SCHEMA:
            layers = tuple(str(x) for x in seen.get("layers") or () if x in LAYER_NAMES)
            return Outcome("present", "restored on this host before the engine started", layers=layers)
    return None


def restore_now(settings: Settings, *, arch: str) -> Outcome:
    """Restore by command (``jitguard warm restore``), whatever JITGUARD_WARM says. Never raises."""
    try:
        return _restore_locked(settings, stack_key(arch), "command")
    except Exception as exc:
        return Outcome("failed", f"{type(exc).__name__}: {exc}")


def outcome_json(outcome: Outcome) -> dict[str, Any]:
    """The outcome for a ``--json`` envelope."""
    data: dict[str, Any] = {
        "outcome": outcome.action,
        "detail": outcome.detail,
        "waited_s": round(outcome.waited, 3),
    }
    if outcome.signature is not None:
        data["signature"] = outcome.signature.to_json()
    if outcome.restored is not None:
        r = outcome.restored
        data["restored"] = {
            "files": len(r.snapshot.files),
            "landed": r.landed,
            "present": r.present,
            "kept_local": r.kept_local,
            "fetched_bytes": r.fetched_bytes,
            "seconds": round(r.seconds, 3),
            "refused": dict(r.refused),
            "integrity": list(r.integrity),
            "absent_layers": dict(r.absent_layers),
            "complete": r.complete,
        }
    if outcome.saved is not None:
        v = outcome.saved
        data["saved"] = {
            "files": len(v.snapshot.files),
            "bytes": v.snapshot.bytes,
            "uploaded_files": v.uploaded_files,
            "uploaded_bytes": v.uploaded_bytes,
            "seconds": round(v.seconds, 3),
            "left_out": dict(v.snapshot.skipped),
            "left_out_examples": {why: list(paths) for why, paths in v.left_out.examples.items()},
        }
    return data


def _restore_locked(settings: Settings, stack: StackKey, engine: str) -> Outcome:
    ensure_visible_logging()
    deadline = time.monotonic() + settings.share_timeout
    name = settings.warm_name
    store = ArtifactStore(
        settings.share_url or "",
        timeout=settings.share_timeout,
        deadline=deadline,
        trust=Trust.from_settings(settings),
    )
    lock = ModuleLock(
        lock_dir(settings.cache_dir, "locks") / f"warm-{_key_text(stack, name)}.lock",
        f"warm snapshot {name!r} ({stack.arch})",
        timeout=settings.share_timeout,
        report_interval=2.0,
        activity="restore",
        timeout_variable="JITGUARD_SHARE_TIMEOUT",
    )
    try:
        lock.acquire()
    except (LockTimeout, LockUnavailable) as exc:
        log.warning(
            "jitguard: not restoring the warm snapshot: %s; the engine compiles as without jitguard", exc
        )
        return Outcome("failed", str(exc))
    try:
        try:
            found = fetch_manifest(store, stack, name)
        except SignatureRefused as exc:
            log.warning(
                "jitguard: refused the warm snapshot in %s: %s; the engine compiles as without jitguard",
                describe_url(store.url),
                exc,
            )
            return Outcome("refused", str(exc), waited=lock.waited, signature=exc.seal)
        except (WarmUnavailable, SnapshotRejected) as exc:
            log.warning(
                "jitguard: the warm snapshot in %s cannot be used (%s); the engine compiles as without jitguard",
                describe_url(store.url),
                exc,
            )
            return Outcome("failed", str(exc), waited=lock.waited)
        if found is None:
            log.info(
                "jitguard: no warm snapshot for this stack in %s yet (%s); this start compiles",
                describe_url(store.url),
                stack.describe(),
            )
            return Outcome("miss", stack.describe(), waited=lock.waited)
        snapshot, manifest_sha = found
        caches = engine_layers(settings, tuple(snapshot.roots))
        marker = _marker(settings, stack, name)
        seen = fileio.read_json(marker, root=settings.cache_dir)
        signed = snapshot.signature
        if seen is not None and seen.get("manifest_sha256") == manifest_sha:
            gone = _first_missing(snapshot, caches)
            if gone is None:
                return Outcome(
                    "present",
                    "restored on this host already",
                    waited=lock.waited,
                    signature=signed,
                    layers=tuple(snapshot.roots),
                )
            log.info("jitguard: the warm snapshot was restored here, but %s is gone: restoring again", gone)
        log.info(
            "jitguard: restoring the warm snapshot %r from %s: %d files, %s, saved by %s, %s",
            name,
            describe_url(store.url),
            len(snapshot.files),
            format_bytes(snapshot.bytes),
            snapshot.publisher or "an unknown host",
            signed.describe() if signed is not None else "unsigned",
        )
        try:
            restored = restore(store, snapshot, caches, progress=_progress_to(lock))
        except WarmUnavailable as exc:
            log.warning(
                "jitguard: the warm snapshot was not restored (%s); what landed is verified, the rest "
                "compiles as without jitguard",
                exc,
            )
            return Outcome("failed", str(exc), waited=lock.waited, signature=signed)
        text = describe_restored(restored)
        if not restored.complete:
            log.warning("jitguard: %s", text)
            return Outcome(
                "partial",
                text,
                restored=restored,
                waited=lock.waited,
                signature=signed,
                layers=tuple(snapshot.roots),
            )
        fileio.write_json(
            marker,
            {
                "schema": MARKER_SCHEMA,
                "manifest_sha256": manifest_sha,
                "files": len(snapshot.files),
                "layers": sorted(snapshot.roots),
                "landed": restored.landed,
                "time": time.time(),
                "pid": os.getpid(),
            },
            root=settings.cache_dir,
        )
        log.info("jitguard: %s", text)
        return Outcome(
            "restored",
            text,
            restored=restored,
            waited=lock.waited,
            signature=signed,
            layers=tuple(snapshot.roots),
        )
    finally:
        lock.release()


def _first_missing(snapshot: Any, caches: tuple[CacheLayer, ...]) -> str | None:
    """The first file of ``snapshot`` that is not in its cache here (one ``lstat`` per file), or None."""
    roots = {cache.name: layer_root(cache) for cache in caches}
    for entry in snapshot.files:
        root = roots.get(entry.layer)
        if root is not None and not os.path.lexists(root / entry.path):
            return f"{entry.layer}/{entry.path}"
    return None


def _progress_to(lock: Any) -> Any:
    def report(done: int, total: int) -> None:
        if done == total or done % 200 == 0:
            lock.update_progress(done, total)

    return report


def describe_restored(restored: Restored) -> str:
    text = (
        f"warm snapshot restored in {restored.seconds:.1f} s: {restored.landed} files written "
        f"({format_bytes(restored.fetched_bytes)} fetched, sha256 verified), {restored.present} already here"
    )
    if restored.kept_local:
        text += f", {restored.kept_local} kept as they were here"
    if restored.refused:
        text += "; not written: " + ", ".join(f"{n} ({why})" for why, n in sorted(restored.refused.items()))
    if restored.integrity:
        shown = ", ".join(restored.integrity[:3]) + (" ..." if len(restored.integrity) > 3 else "")
        text += (
            f"; integrity: {len(restored.integrity)} files skipped, their blobs fail their SHA-256 (the store "
            f"holds damaged or tampered bytes: {shown})"
        )
    for layer, why in sorted(restored.absent_layers.items()):
        text += f"; layer {layer} absent ({why})"
    if restored.swept:
        text += f"; {restored.swept} temporary files of an interrupted restore removed"
    return text


def save_now(
    settings: Settings,
    *,
    engine: str = "vllm",
    arch: str | None = None,
    only_if_new: bool,
    layer_names: tuple[str, ...] | None = None,
) -> Outcome:
    """Save this host's caches as the snapshot (``only_if_new``: unless the store's snapshot already holds
    every file here). Never raises."""
    try:
        stack = _this_stack(settings, arch)
        if isinstance(stack, Outcome):
            return stack
        trust = Trust.from_settings(settings)
        signer = trust.signer()  # a key that cannot be used stops the save before any upload
        store = ArtifactStore(settings.share_url or "", timeout=settings.share_timeout, trust=trust)
        chosen = engine_layers(settings, layer_names or ENGINE_LAYERS.get(engine, LAYER_NAMES))
        if only_if_new:
            try:
                found = fetch_manifest(store, stack, settings.warm_name)
            except (SnapshotRejected, SignatureRefused):
                found = None  # a damaged manifest, or one this host does not trust, is replaced
            signature = found[0].signature if found is not None else None
            if signer is not None and (signature is None or signature.signer != signer.public.key_id):
                found = None  # this host signs: a manifest it did not sign is replaced by a signed one
            if found is not None:
                stored = {(f.layer, f.path, f.size) for f in found[0].files}
                if listing(chosen) <= stored:
                    return Outcome("unchanged", "the store's snapshot holds every file here")
        saved = save(store, stack, settings.warm_name, chosen)
    except NothingToSave as exc:
        log.warning("jitguard: the warm snapshot was not saved: %s", exc)
        return Outcome("failed", str(exc))
    except (WarmUnavailable, SigningError, OSError) as exc:
        log.warning("jitguard: the warm snapshot was not saved: %s", exc)
        return Outcome("failed", str(exc))
    except Exception as exc:
        log.warning("jitguard: the warm snapshot was not saved: %s: %s", type(exc).__name__, exc)
        return Outcome("failed", f"{type(exc).__name__}: {exc}")
    signed = f", signed by key {signer.public.key_id}" if signer is not None else ", unsigned"
    log.info("jitguard: %s%s", describe_saved(saved, store.url), signed)
    return Outcome("saved", describe_saved(saved, store.url) + signed, saved=saved)


def describe_saved(saved: Saved, url: str) -> str:
    text = (
        f"warm snapshot {saved.snapshot.name!r} saved to {describe_url(url)} in {saved.seconds:.1f} s: "
        f"{len(saved.snapshot.files)} files, {format_bytes(saved.snapshot.bytes)} "
        f"({saved.uploaded_files} new blobs, {format_bytes(saved.uploaded_bytes)} uploaded)"
    )
    if saved.left_out.counts:
        text += f"; left out: {saved.left_out.describe()}"
    return text


def save_when_ready(settings: Settings, *, engine: str = "vllm") -> threading.Thread | None:
    """Start saving in the background once an engine is ready, where ``JITGUARD_SHARE_PUBLISH=1``; one
    process per host at a time (a process that finds another saving leaves it to that one)."""
    if settings.disabled or settings.warm == "off" or not settings.share_url or not settings.share_publish:
        return None

    def run() -> None:
        lock = ModuleLock(
            lock_dir(settings.cache_dir, "locks") / "warm-save.lock",
            "warm snapshot save",
            timeout=0.0,
        )
        try:
            lock.acquire()
        except (LockTimeout, LockUnavailable):
            log.info("jitguard: another process on this host is saving the warm snapshot")
            return
        try:
            with tally.timed("save"):
                save_now(settings, engine=engine, only_if_new=True)
        finally:
            lock.release()

    # A daemon: the engine's exit never waits for a save (a save cut short publishes no manifest).
    thread = threading.Thread(target=run, name="jitguard-warm-save", daemon=True)
    thread.start()
    return thread
