"""Fetch before building, publish after: a module's build shared by the fleet through the artifact store.

``Share`` keys one build by module, build identity and a path-free digest of what is compiled, so hosts with
different workspaces agree; ``fetch`` installs the files and a marker that lets the build stage take the
fetched library as up to date (``is_fetched``), ``publish`` uploads them. Never raises: a store that fails is
one warning and a local build, and is not asked again for ``_DOWN_FOR_S`` seconds.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import subprocess
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from jitguard.fileio import write_json
from jitguard.fleet.artifact_store import (
    ArtifactKey,
    ArtifactRejected,
    ArtifactStore,
    Fetched,
    StoreUnavailable,
    describe_url,
)
from jitguard.fleet.signing import SignatureRefused, SigningError

if TYPE_CHECKING:
    from jitguard.fleet.signing import Trust

log = logging.getLogger("jitguard.share")

MARKER_SUFFIX = ".jitguard-fetched.json"
MARKER_SCHEMA = "jitguard.fetched/1"
_DOWN_FOR_S = 300.0
_down: dict[str, tuple[float, str]] = {}  # store URL -> (until, why), per process


@dataclass(frozen=True)
class ShareOutcome:
    """What the store did for one build: ``operation`` fetch | publish; ``action`` fetched | published |
    miss | skipped (the store failed earlier in this process) | refused (not signed by a key this host
    trusts: ``fleet.signing``) | failed."""

    operation: str
    action: str
    url: str
    detail: str = ""
    files: tuple[str, ...] = ()
    bytes: int = 0
    seconds: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return {
            "operation": self.operation,
            "action": self.action,
            "url": describe_url(self.url),
            "detail": self.detail,
            "files": list(self.files),
            "bytes": self.bytes,
            "seconds": round(self.seconds, 3),
        }


@dataclass(frozen=True)
class Share:
    """One module's place in one store."""

    url: str
    key: ArtifactKey
    timeout: float
    trust: Trust | None = None  # None: JITGUARD_SIGNING_KEY / JITGUARD_TRUSTED_KEYS (fleet.signing)

    def _store(self) -> ArtifactStore:
        return ArtifactStore(self.url, timeout=self.timeout, trust=self.trust)

    def fetch(self, destination: Path) -> ShareOutcome:
        """Fetch the module into ``destination``. ``action`` is 'fetched' only when every file was verified
        and installed."""
        skipped = _skip(self.url, "fetch")
        if skipped is not None:
            return skipped
        try:
            fetched = self._store().fetch(self.key, destination)
        except (StoreUnavailable, ArtifactRejected) as exc:
            return _failed(self.url, self.key.module, "fetch", exc)
        except Exception as exc:  # a bug of ours is still only a local build
            return _failed(self.url, self.key.module, "fetch", exc)
        if fetched is None:
            log.info(
                "jitguard: %s is not in the store %s yet; building it here",
                self.key.module,
                describe_url(self.url),
            )
            return ShareOutcome("fetch", "miss", self.url, "not in the store")
        _mark(fetched, self.key)
        signed = f", {fetched.seal.describe()}" if fetched.seal is not None else ""
        log.info(
            "jitguard: fetched %s from %s (%d bytes in %.1f s, sha256 verified%s)",
            self.key.module,
            describe_url(self.url),
            fetched.bytes,
            fetched.seconds,
            signed,
        )
        return ShareOutcome(
            "fetch",
            "fetched",
            self.url,
            f"published by {fetched.manifest.publisher or 'an unknown host'}{signed}",
            tuple(p.name for p in fetched.paths),
            fetched.bytes,
            fetched.seconds,
        )

    def publish(self, files: Mapping[str, Path], extra: Mapping[str, Any] | None = None) -> ShareOutcome:
        skipped = _skip(self.url, "publish")
        if skipped is not None:
            return skipped
        started = time.monotonic()
        try:
            manifest = self._store().publish(self.key, files, extra)
        except Exception as exc:  # StoreUnavailable, or anything the backend raised
            return _failed(self.url, self.key.module, "publish", exc)
        size = sum(f.size for f in manifest.files)
        log.info("jitguard: published %s to %s (%d bytes)", self.key.module, describe_url(self.url), size)
        return ShareOutcome(
            "publish",
            "published",
            self.url,
            "",
            tuple(f.name for f in manifest.files),
            size,
            time.monotonic() - started,
        )


def _skip(url: str, operation: str) -> ShareOutcome | None:
    down = _down.get(url)
    if down is not None and time.monotonic() < down[0]:
        return ShareOutcome(operation, "skipped", url, f"the store failed earlier in this process: {down[1]}")
    return None


def _failed(url: str, module: str, what: str, exc: BaseException) -> ShareOutcome:
    reason = str(exc) or type(exc).__name__
    if isinstance(exc, SignatureRefused):
        log.warning(
            "jitguard: refused the manifest the store %s holds for %s: %s; building it here instead",
            describe_url(url),
            module,
            reason,
        )
        return ShareOutcome(what, "refused", url, reason)
    action = "building it here" if what == "fetch" else "the build itself is kept"
    if isinstance(exc, SigningError):  # this host's keys, not the store: the store stays in use
        log.warning("jitguard: cannot %s %s through the store: %s; %s", what, module, reason, action)
    elif isinstance(exc, ArtifactRejected):
        log.warning(
            "jitguard: refused what the store %s holds for %s: %s; building it here instead",
            describe_url(url),
            module,
            reason,
        )
    else:
        _down[url] = (time.monotonic() + _DOWN_FOR_S, reason)
        log.warning("jitguard: cannot %s %s through the store: %s; %s", what, module, reason, action)
    return ShareOutcome(what, "failed", url, reason)


# -- markers: "this file is the fetched one" ---------------------------------------------------------------


def _marker(path: Path) -> Path:
    return path.with_name(path.name + MARKER_SUFFIX)


def _mark(fetched: Fetched, key: ArtifactKey) -> None:
    for path, entry in zip(fetched.paths, fetched.manifest.files, strict=True):
        with contextlib.suppress(OSError):
            st = path.stat()
            _write_json(
                _marker(path),
                {
                    "schema": MARKER_SCHEMA,
                    "module": key.module,
                    "build_fingerprint": key.build_fingerprint,
                    "variant": key.variant,
                    "sha256": entry.sha256,
                    "size": st.st_size,
                    "mtime_ns": st.st_mtime_ns,
                },
            )


def has_marker(path: Path) -> bool:
    return _marker(path).exists()


def is_fetched(paths: Iterable[Path], variant: str) -> bool:
    """Every one of ``paths`` is a file fetched for ``variant`` and unchanged since (size and mtime)."""
    paths = list(paths)
    if not paths:
        return False
    for path in paths:
        try:
            data = json.loads(_marker(path).read_text(encoding="utf-8"))
            st = path.stat()
        except (OSError, ValueError):
            return False
        if (
            not isinstance(data, dict)
            or data.get("schema") != MARKER_SCHEMA
            or data.get("variant") != variant
        ):
            return False
        if data.get("size") != st.st_size or data.get("mtime_ns") != st.st_mtime_ns:
            return False
    return True


def forget_fetched(paths: Iterable[Path]) -> None:
    for path in paths:
        with contextlib.suppress(OSError):
            _marker(path).unlink()


def _write_json(path: Path, data: dict[str, Any]) -> None:
    write_json(path, data)


# -- variants: what is built, independent of where ---------------------------------------------------------


def _digest(parts: Iterable[bytes]) -> str:
    digest = hashlib.sha256()
    for part in parts:
        digest.update(len(part).to_bytes(8, "little"))
        digest.update(part)
    return digest.hexdigest()[:32]


def _portable(text: str, roots: Sequence[tuple[str, str]]) -> str:
    for root, placeholder in roots:
        if root:
            text = text.replace(root, placeholder)
    return text


def spec_variant(spec: Any) -> str:
    """The variant of a FlashInfer ``JitSpec``: its name, flags and sources (file names and bytes), with the
    workspace and FlashInfer's own directory taken out of every path, so hosts with other workspaces or
    other virtualenv paths agree."""
    build_dir = Path(spec.build_dir)
    roots = [(str(build_dir.parent.parent), "<flashinfer-jit>")]
    with contextlib.suppress(Exception):
        import importlib.util

        found = importlib.util.find_spec("flashinfer")
        if found is not None and found.submodule_search_locations:
            roots.append((str(Path(next(iter(found.submodule_search_locations))).parent), "<site>"))
    parts = [str(spec.name).encode()]
    for flags in (spec.extra_cflags, spec.extra_cuda_cflags, spec.extra_ldflags, spec.extra_include_dirs):
        parts.append(_portable(repr([str(f) for f in flags or ()]), roots).encode())
    parts.append(str(bool(getattr(spec, "needs_device_linking", False))).encode())
    for source in spec.sources:
        parts.append(_portable(str(source), roots).encode())
        try:
            parts.append(Path(source).read_bytes())
        except OSError:
            parts.append(b"<unreadable>")
    return _digest(parts)


def _ninja(ninja: str, build_dir: Path, manifest: Path, *tool: str) -> list[str]:
    proc = subprocess.run(
        [ninja, "-C", str(build_dir), "-f", str(manifest.resolve()), "-t", *tool],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        errors="replace",
        timeout=60,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"ninja -t {' '.join(tool)}: {proc.stderr.strip()[:300]}")
    return proc.stdout.splitlines()


def ninja_artifacts(ninja: str, build_dir: Path, manifest: Path) -> list[str]:
    """The final products of a ninja project: its root targets, a phony root replaced by its inputs."""
    found: list[str] = []
    for line in _ninja(ninja, build_dir, manifest, "targets"):
        target, _, rule = line.rpartition(": ")
        if rule.strip() != "phony":
            found.append(target)
            continue
        query = _ninja(ninja, build_dir, manifest, "query", target)
        inputs = [q.strip() for q in query[2:] if q.startswith("    ") and not q.strip().startswith("|")]
        found += inputs
    return sorted(dict.fromkeys(found))


def ninja_variant(ninja: str, build_dir: Path, manifest: Path, artifacts: Sequence[str]) -> str:
    """The variant of a ninja project: its manifest (the build directory taken out) and the names and bytes of
    every source the artifacts are built from (inputs that no rule of the project produces). Headers that only
    a depfile names are not part of it (a fresh host has no deps log yet)."""
    roots = [(str(build_dir.resolve()), "<build>")]
    parts = [
        _portable(manifest.read_text("utf-8", "surrogateescape"), roots).encode("utf-8", "surrogateescape")
    ]
    produced = {line.rpartition(": ")[0] for line in _ninja(ninja, build_dir, manifest, "targets", "all")}
    for name in sorted(artifacts):
        parts.append(name.encode())
    for name in sorted(set(_ninja(ninja, build_dir, manifest, "inputs", *artifacts)) - produced):
        path = Path(name) if os.path.isabs(name) else build_dir / name
        parts.append(_portable(name, roots).encode())
        try:
            parts.append(path.read_bytes())
        except OSError:
            parts.append(b"<unreadable>")
    return _digest(parts)


@dataclass(frozen=True)
class NinjaShare:
    """A ninja project's key in the stores and the artifacts (paths relative to the build directory) it
    fetches and publishes."""

    key: ArtifactKey
    timeout: float
    build_dir: Path
    artifacts: tuple[str, ...]

    @property
    def paths(self) -> list[Path]:
        return [self.build_dir / name for name in self.artifacts]

    def is_current(self) -> bool:
        """The artifacts in place are the ones fetched for this variant (nothing to build)."""
        return is_fetched(self.paths, self.key.variant)

    def fetch(self, url: str) -> ShareOutcome:
        """Fetch the artifacts into the build directory. They are files of one directory in the store, so a
        project whose artifacts lie in several directories is not fetched (a miss)."""
        parents = {Path(name).parent for name in self.artifacts}
        if len(parents) != 1:
            return ShareOutcome("fetch", "miss", url, "the artifacts lie in several directories")
        return Share(url, self.key, self.timeout).fetch(self.build_dir / parents.pop())

    def publish(self, url: str, extra: Mapping[str, Any] | None = None) -> ShareOutcome:
        files = {Path(name).name: self.build_dir / name for name in self.artifacts}
        missing = [str(p) for p in files.values() if not p.is_file()]
        if missing:
            return ShareOutcome("publish", "failed", url, f"not built: {', '.join(missing)}")
        return Share(url, self.key, self.timeout).publish(files, extra)


def ninja_share(
    ninja: str,
    build_dir: Path,
    manifest: Path,
    *,
    module: str,
    timeout: float,
    build_fingerprint: str,
    artifacts: Sequence[str] = (),
) -> NinjaShare:
    """The store key of a ninja project. Raises RuntimeError when ninja cannot list the project's targets."""
    chosen = list(artifacts) or ninja_artifacts(ninja, build_dir, manifest)
    if not chosen:
        raise RuntimeError(f"{manifest} has no target to share; name one with --artifact")
    if len({Path(a).name for a in chosen}) != len(chosen):
        raise RuntimeError("two artifacts have the same file name; a store entry holds plain file names")
    variant = ninja_variant(ninja, build_dir, manifest, chosen)
    return NinjaShare(
        ArtifactKey(module, build_fingerprint, variant), timeout, Path(build_dir), tuple(chosen)
    )
