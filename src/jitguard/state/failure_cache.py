"""The failure cache: the outcome of the last build of a module in one environment, per (module, fingerprint).

A build that failed for a reason of the environment fails the same way next time, so the next start skips it
and falls back at once; the fingerprint in the key and a TTL (``JITGUARD_FAILURE_TTL``, 7 days) let it be tried
again when something changed. One JSON file per key under ``<cache_dir>/outcomes/``, written atomically under
the cache dir's trust rules (``jitguard.fileio``): anything it cannot read or write is a miss, never an error.
"""

from __future__ import annotations

import hashlib
import logging
import math
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from jitguard import fileio
from jitguard.config import default_cache_dir, read
from jitguard.errors import StateUnwritable
from jitguard.findings.model import Finding
from jitguard.version import __version__

SCHEMA = "jitguard.failure-cache/1"
DEFAULT_TTL_S = 7 * 24 * 3600.0
TTL_ENV = "JITGUARD_FAILURE_TTL"
# A record dated further in the future than this has expired: a clock that jumped back would otherwise pin it.
_MAX_CLOCK_SKEW_S = 300.0

log = logging.getLogger("jitguard.state")

Outcome = Literal["failure", "success"]

# Causes that belong to one attempt, not to the environment: the next attempt may well succeed, so a failure
# carrying any of them is never cached (by any caller: the build hook, the GDN resolver, the CLI).
# memory-too-small is pre-flight's verdict on the memory available right now (MemAvailable moves with other
# processes, and is not in the fingerprint); pre-flight runs again before every cold build anyway.
TRANSIENT_CODES = frozenset(
    {
        "build-timeout",
        "build-stalled",
        "build-interrupted",
        "lock-timeout",
        "disk-full",
        "disk-low",
        "memory-too-small",
    }
)


@dataclass(frozen=True)
class FailureRecord:
    """One cached outcome. ``get`` only returns records with ``outcome == 'failure'``."""

    module: str
    fingerprint: str
    outcome: Outcome
    findings: tuple[Finding, ...]
    log_path: str | None
    created: float
    jitguard_version: str
    # What was built (e.g. a digest of the module's sources and flags), when the caller knows it: a failure
    # of other sources is not this build's failure, even in the same environment.
    source_digest: str | None = None

    @property
    def failed(self) -> bool:
        return self.outcome == "failure"

    @property
    def codes(self) -> tuple[str, ...]:
        return tuple(f.code for f in self.findings)

    def age(self, now: float | None = None) -> float:
        return max(0.0, (time.time() if now is None else now) - self.created)

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA,
            "module": self.module,
            "fingerprint": self.fingerprint,
            "outcome": self.outcome,
            "findings": [f.to_json() for f in self.findings],
            "log_path": self.log_path,
            "created": self.created,
            "jitguard": self.jitguard_version,
            "source_digest": self.source_digest,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> FailureRecord:
        """Raises KeyError, TypeError or ValueError on anything malformed."""
        if data.get("schema") != SCHEMA:
            raise ValueError(f"schema {data.get('schema')!r}")
        outcome = data["outcome"]
        if outcome not in ("failure", "success"):
            raise ValueError(f"outcome {outcome!r}")
        log_path = data.get("log_path")
        digest = data.get("source_digest")
        created = data["created"]
        if not isinstance(created, (int, float)) or not math.isfinite(created):
            raise ValueError(f"created {created!r}")  # NaN would never expire
        return cls(
            module=_text(data["module"]),
            fingerprint=_text(data["fingerprint"]),
            outcome=outcome,
            findings=tuple(Finding.from_json(f) for f in data.get("findings", ())),
            log_path=None if log_path is None else _text(log_path),
            created=float(created),
            jitguard_version=_text(data.get("jitguard", "")),
            source_digest=None if digest is None else _text(digest),
        )


def _text(value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError(f"expected a string, got {type(value).__name__}")
    return value


def ttl_from_env(env: Mapping[str, str] | None = None) -> float:
    """JITGUARD_FAILURE_TTL ('168h', '90m' or seconds; parsed with the other settings) or 7 days."""
    ttl = read(TTL_ENV, env)
    return DEFAULT_TTL_S if ttl is None else float(ttl)


class FailureCache:
    """Outcomes per (module, fingerprint) under ``cache_dir/outcomes``."""

    def __init__(self, cache_dir: Path, *, ttl: float = DEFAULT_TTL_S) -> None:
        if ttl <= 0:
            raise ValueError("ttl must be positive")
        self.cache_dir = Path(cache_dir)
        self.root = self.cache_dir / "outcomes"
        self.ttl = ttl

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> FailureCache:
        """The cache in JITGUARD_CACHE_DIR (or the user cache dir) with JITGUARD_FAILURE_TTL."""
        return cls(default_cache_dir(env), ttl=ttl_from_env(env))

    def path_for(self, module: str, fingerprint: str) -> Path:
        return self.root / f"{fileio.safe_name(module)}@{_digest(fingerprint)}.json"

    def lookup(self, module: str, fingerprint: str, *, now: float | None = None) -> FailureRecord | None:
        """The live record for this key, success or failure; None when missing, expired or unreadable."""
        record = self._read(self.path_for(module, fingerprint))
        if record is None or record.module != module or record.fingerprint != fingerprint:
            return None
        return None if self._expired(record, now) else record

    def get(
        self, module: str, fingerprint: str, *, source_digest: str | None = None, now: float | None = None
    ) -> FailureRecord | None:
        """The cached failure for this key, or None (no record, a success, expired, or unreadable).

        With ``source_digest``, a failure recorded for other sources is a miss too.
        """
        record = self.lookup(module, fingerprint, now=now)
        if record is None or not record.failed:
            return None
        if source_digest and record.source_digest and record.source_digest != source_digest:
            return None
        return record

    def failures(
        self, fingerprint: str, *, modules: Iterable[str] = (), prefixes: tuple[str, ...] = ()
    ) -> list[FailureRecord]:
        """The live failures recorded under ``fingerprint`` for each of ``modules`` (its one file) and for every
        module whose name starts with one of ``prefixes`` (newest first). The one reader of failures for a
        verdict: the GDN op and the engine guard both ask here."""
        found = [r for r in (self.get(m, fingerprint) for m in modules) if r is not None]
        if prefixes:
            named = {r.module for r in found}
            found += [
                r
                for r in self.entries()
                if r.failed
                and r.fingerprint == fingerprint
                and r.module.startswith(prefixes)
                and r.module not in named
            ]
        return found

    def record_failure(
        self,
        module: str,
        fingerprint: str,
        findings: Sequence[Finding],
        log_path: str | Path | None = None,
        *,
        source_digest: str | None = None,
    ) -> FailureRecord | None:
        """Remember a failure; returns None without writing when a finding's cause is transient
        (``TRANSIENT_CODES``) or there is no finding to remember."""
        if not findings or any(f.code in TRANSIENT_CODES for f in findings):
            return None
        return self._write(module, fingerprint, "failure", tuple(findings), log_path, source_digest)

    def record_success(
        self, module: str, fingerprint: str, *, source_digest: str | None = None
    ) -> FailureRecord | None:
        """Remember a success (it clears a recorded failure); None when it cannot be written."""
        return self._write(module, fingerprint, "success", (), None, source_digest)

    def forget(self, modules: Iterable[str], *, prefixes: tuple[str, ...] = ()) -> dict[str, int]:
        """Remove every record (all fingerprints, expired ones too) of ``modules`` and of each module whose
        name starts with one of ``prefixes``. Returns how many files went per module name."""
        names = tuple(modules)
        by_file = {f"{fileio.safe_name(name)}@": name for name in names}
        chosen: dict[Path, str] = {}
        for path in fileio.json_files(self.root):
            record = self._read(path)
            if record is not None and (record.module in names or record.module.startswith(prefixes)):
                chosen[path] = record.module
            else:  # by name too, so an unreadable file of a named module goes as well
                name = next((n for f, n in by_file.items() if path.name.startswith(f)), None)
                if name is not None:
                    chosen[path] = name
        _, stayed = fileio.remove_each(chosen)
        if stayed:
            raise StateUnwritable("remove cached build outcomes", self.root, stayed)
        counts: dict[str, int] = {}
        for name in chosen.values():
            counts[name] = counts.get(name, 0) + 1
        return dict(sorted(counts.items()))

    def entries(self, *, include_expired: bool = False, now: float | None = None) -> list[FailureRecord]:
        """Every readable record, newest first. Unreadable files are skipped (``clear`` removes them)."""
        found = []
        for path in fileio.json_files(self.root):
            record = self._read(path)
            if record is not None and (include_expired or not self._expired(record, now)):
                found.append(record)
        return sorted(found, key=lambda r: r.created, reverse=True)

    def clear(self) -> int:
        """Remove every file of the cache, readable or not (a directory or link in the way too). Returns how
        many went; raises ``StateUnwritable`` naming what could not go."""
        return self._remove(lambda _record, _path: True)

    def prune(self, *, now: float | None = None) -> int:
        """Remove expired and unreadable files."""
        return self._remove(lambda record, _path: record is None or self._expired(record, now))

    # -- internals ----------------------------------------------------------------------------------------

    def _write(
        self,
        module: str,
        fingerprint: str,
        outcome: Outcome,
        findings: tuple[Finding, ...],
        log_path: str | Path | None,
        source_digest: str | None,
    ) -> FailureRecord | None:
        if not module or not fingerprint:
            raise ValueError("module and fingerprint must be non-empty")
        record = FailureRecord(
            module=module,
            fingerprint=fingerprint,
            outcome=outcome,
            findings=findings,
            log_path=None if log_path is None else str(log_path),
            created=time.time(),
            jitguard_version=__version__,
            source_digest=source_digest,
        )
        try:
            fileio.write_json(self.path_for(module, fingerprint), record.to_json(), root=self.cache_dir)
        except OSError as exc:
            log.info("jitguard: the %s of %s is not remembered: %s", outcome, module, exc)
            return None
        return record

    def _read(self, path: Path) -> FailureRecord | None:
        data = fileio.read_json(path, root=self.cache_dir)
        if data is None:
            return None
        try:
            return FailureRecord.from_json(data)
        except (KeyError, TypeError, ValueError, AttributeError):
            return None

    def _expired(self, record: FailureRecord, now: float | None) -> bool:
        now = time.time() if now is None else now
        return record.created > now + _MAX_CLOCK_SKEW_S or record.age(now) > self.ttl

    def _remove(self, select: Callable[[FailureRecord | None, Path], bool]) -> int:
        chosen = [path for path in fileio.json_files(self.root) if select(self._read(path), path)]
        removed, stayed = fileio.remove_each(chosen)
        if stayed:
            raise StateUnwritable("remove cached build outcomes", self.root, stayed)
        return removed


def _digest(fingerprint: str) -> str:
    return hashlib.sha256(fingerprint.encode()).hexdigest()[:20]
