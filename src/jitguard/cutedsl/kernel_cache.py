"""The kernel cache: compiled GPU kernels kept on disk, so the next process loads what an earlier one compiled.

One entry per ``KernelKey`` under ``<cache_dir>/kernels/``: the object, then its manifest linked into place
last, so an entry is whole or absent and the first of two publishers wins. Read under the cache dir's trust
rules; an object that does not match its manifest is a miss and is removed. Nothing raises to the caller
(``persisting_compile`` decides what to key, export and load).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jitguard import fileio
from jitguard.version import __version__

SCHEMA = "jitguard.kernel-cache/1"
# A CuTeDSL kernel object holds its cubin and host code: ~1-10 MB. Anything far larger is not one of ours.
MAX_OBJECT_BYTES = 512 * 1024 * 1024
FORMATS = ("cute-object", "tvm-ffi-object")
_OBJECT_NAME = re.compile(r"[0-9a-f]{64}-[0-9a-f]{16}\.o")

log = logging.getLogger("jitguard.state")


@dataclass(frozen=True)
class KernelKey:
    """What makes one compiled kernel: ``material`` (name -> text) hashed into ``digest``; ``name`` is for
    people (logs, ``cache list``)."""

    name: str
    material: Mapping[str, str]

    @property
    def digest(self) -> str:
        text = json.dumps(dict(self.material), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()

    @property
    def symbol(self) -> str:
        """The C symbol prefix the object exports its entry under (unique per key, a valid identifier)."""
        return "jitguard_" + self.digest[:24]


@dataclass(frozen=True)
class KernelEntry:
    """A verified entry: ``blob`` is exactly the bytes that were published for ``key``."""

    key_digest: str
    name: str
    symbol: str
    format: str
    blob: bytes
    created: float
    path: Path


@dataclass(frozen=True)
class Lookup:
    """The answer of ``KernelCache.get``: an entry, or why there is none (``reason`` is for a debug log)."""

    entry: KernelEntry | None
    reason: str


class KernelCache:
    def __init__(self, cache_dir: Path) -> None:
        self.cache_dir = Path(cache_dir).expanduser()
        self.root = self.cache_dir / "kernels"

    def _manifest_path(self, digest: str) -> Path:
        return self.root / f"{digest}.json"

    def get(self, key: KernelKey) -> Lookup:
        digest = key.digest
        manifest_path = self._manifest_path(digest)
        try:
            manifest = json.loads(fileio.read_bytes(manifest_path, root=self.cache_dir))
        except FileNotFoundError:
            return Lookup(None, "no entry")
        except fileio.UntrustedPath as exc:
            return Lookup(None, f"not trusted: {exc.strerror}")  # not ours to judge, nor to remove
        except (OSError, ValueError, RecursionError) as exc:
            manifest = None
            why = exc.strerror if isinstance(exc, OSError) else "not JSON"
        if not isinstance(manifest, dict):
            self._drop(digest, None)
            return Lookup(None, f"manifest unreadable ({why if manifest is None else 'not an object'})")
        problem = _manifest_problem(manifest, digest)
        if problem:
            self._drop(digest, manifest)
            return Lookup(None, problem)
        obj_path = self.root / manifest["object"]
        try:
            blob = fileio.read_bytes(obj_path, root=self.cache_dir, limit=MAX_OBJECT_BYTES)
        except OSError as exc:
            if isinstance(exc, fileio.UntrustedPath):
                return Lookup(None, f"object not trusted: {exc.strerror}")
            self._drop(digest, manifest)
            return Lookup(None, f"object unreadable: {exc.strerror or exc}")
        if len(blob) != manifest["size"] or hashlib.sha256(blob).hexdigest() != manifest["sha256"]:
            self._drop(digest, manifest)
            return Lookup(None, "object does not match its manifest (sha256)")
        entry = KernelEntry(
            key_digest=digest,
            name=str(manifest.get("name") or key.name),
            symbol=manifest["symbol"],
            format=manifest["format"],
            blob=blob,
            created=float(manifest["created"]),
            path=obj_path,
        )
        return Lookup(entry, "hit")

    def put(self, key: KernelKey, blob: bytes, *, format: str) -> bool:
        """Publish ``blob`` for ``key`` unless a valid entry is there already (the first publish is kept).
        True when this call published it; False when it was there, or could not be written (logged)."""
        if format not in FORMATS:
            raise ValueError(f"unknown kernel object format {format!r}")
        if self.get(key).entry is not None:
            return False
        digest = key.digest
        sha256 = hashlib.sha256(blob).hexdigest()
        obj_name = f"{digest}-{sha256[:16]}.o"
        manifest = {
            "schema": SCHEMA,
            "key": digest,
            "name": key.name,
            "object": obj_name,
            "symbol": key.symbol,
            "format": format,
            "sha256": sha256,
            "size": len(blob),
            "created": time.time(),
            "pid": os.getpid(),
            "jitguard_version": __version__,
            "material": dict(key.material),
        }
        try:
            fileio.write_atomic(self.root / obj_name, blob, root=self.cache_dir)
            return fileio.write_new(
                self._manifest_path(digest), fileio.json_bytes(manifest), root=self.cache_dir
            )
        except OSError as exc:
            log.warning(
                "jitguard: could not keep the compiled kernel %s in %s (%s); it will be compiled again next time",
                key.name,
                self.root,
                exc.strerror or exc,
            )
            return False

    def entries(self) -> list[dict[str, Any]]:
        """The manifests of the entries (for ``jitguard cache list``), oldest first; unreadable ones left out."""
        found = []
        for path in fileio.json_files(self.root):
            manifest = fileio.read_json(path, root=self.cache_dir)
            if manifest is not None and not _manifest_problem(manifest, path.stem):
                found.append(manifest)
        return sorted(found, key=lambda m: float(m["created"]))

    def clear(self) -> tuple[int, list[tuple[str, str]]]:
        """Remove every entry: (how many files went, (path, reason) for each that stayed)."""
        try:
            paths = list(self.root.iterdir())
        except OSError:
            return 0, []
        return fileio.remove_each(paths)

    def _drop(self, digest: str, manifest: Mapping[str, Any] | None) -> None:
        """Remove a broken entry of ours: its manifest, and the object it names (when that is one of ours)."""
        log.info("jitguard: dropping the broken kernel cache entry %s", digest[:16])
        paths = [self._manifest_path(digest)]
        named = manifest.get("object") if manifest is not None else None
        if isinstance(named, str) and _OBJECT_NAME.fullmatch(named) and named.startswith(digest):
            paths.append(self.root / named)
        for path in paths:
            if _ours(path):  # never remove what another user put there; it is ignored anyway
                with contextlib.suppress(OSError):
                    fileio.remove(path)


def _ours(path: Path) -> bool:
    return fileio.is_regular(path, own=True)


def _manifest_problem(manifest: Mapping[str, Any], digest: str) -> str:
    """Why ``manifest`` is not a usable entry for ``digest`` ('' when it is)."""
    if manifest.get("schema") != SCHEMA:
        return f"manifest schema {manifest.get('schema')!r}, not {SCHEMA}"
    if manifest.get("key") != digest:
        return "manifest belongs to another key"
    named = manifest.get("object")
    if not isinstance(named, str) or not _OBJECT_NAME.fullmatch(named) or not named.startswith(digest + "-"):
        return "manifest names no object of this key"
    if manifest.get("format") not in FORMATS:
        return f"unknown object format {manifest.get('format')!r}"
    symbol = manifest.get("symbol")
    if not isinstance(symbol, str) or not symbol.isidentifier():
        return "manifest symbol is not a C identifier"
    sha = manifest.get("sha256")
    if not isinstance(sha, str) or not fileio.SHA256_HEX.fullmatch(sha) or named != f"{digest}-{sha[:16]}.o":
        return "manifest has no sha256 matching its object"
    size = manifest.get("size")
    if not isinstance(size, int) or isinstance(size, bool) or not 0 < size <= MAX_OBJECT_BYTES:
        return "manifest size out of range"
    created = manifest.get("created")
    if not isinstance(created, (int, float)) or isinstance(created, bool):
        return "manifest has no creation time"
    return ""
