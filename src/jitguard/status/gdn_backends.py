"""What this process's environment says about each GDN backend: pre-flight findings on its facts plus the
failure cache. The I/O half of the GDN decision (``jitguard.decision.gdn_resolution`` is the pure half), asked by the op's
dispatcher and, for FlashInfer's, by the engine guard (``status.engine_choices``).

Facts are collected at most once (and only when a status is asked for); statuses are cached per backend
until ``record_failure`` or ``clear``. Nothing here raises: a crash in jitguard's own checks becomes a
finding (docs/failsafe.md), so the verdict says "unknown", never "passed".
"""

from __future__ import annotations

import logging
import threading
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple, Protocol

from jitguard.config import Settings
from jitguard.decision.gdn_resolution import BackendStatus
from jitguard.facts import collect
from jitguard.findings.cached_failures import cached_failure
from jitguard.findings.catalog import make
from jitguard.findings.checks import preflight as run_checks
from jitguard.findings.model import Finding
from jitguard.state.failure_cache import FailureCache, FailureRecord, ttl_from_env
from jitguard.state.module_names import GDN_OP_FLASHINFER

if TYPE_CHECKING:
    from jitguard.facts import Facts

log = logging.getLogger("jitguard")


class Checked(Protocol):
    """What a status needs of a GDN backend (a module of ``jitguard.gdn.backends`` or a ``Backend``)."""

    @property
    def NAME(self) -> str: ...
    @property
    def TITLE(self) -> str: ...
    @property
    def MODULE(self) -> str | None: ...


class Backend(NamedTuple):
    """A GDN backend's name, title and failure-cache module, where the backend itself is not imported."""

    NAME: str
    TITLE: str
    MODULE: str | None


# The op's FlashInfer backend: ``jitguard.gdn.backends.flashinfer`` takes its names from here.
FLASHINFER_GDN = Backend("flashinfer", "FlashInfer GDN prefill", GDN_OP_FLASHINFER)


def guarded(backend: str, title: str, probe: Callable[[], list[Finding]]) -> list[Finding]:
    """Run a diagnosis step; a crash in jitguard's own checks must never take the op down."""
    try:
        return probe()
    except Exception as exc:
        log.debug("jitguard: pre-flight for %s crashed", backend, exc_info=True)
        return [
            make(
                "gdn-preflight-crashed",
                backend=backend,
                evidence=traceback.format_exception_only(type(exc), exc)[-1:],
                title=title,
                error=f"{type(exc).__name__}: {exc}",
            )
        ]


class BackendStatuses:
    """The GDN backends' statuses in this environment (see the module docstring)."""

    def __init__(self, *, facts: Facts | None = None, cache_dir: Path | None = None) -> None:
        self._facts = facts
        self._cache_dir = cache_dir
        self._statuses: dict[str, BackendStatus] = {}
        self._lock = threading.RLock()

    @property
    def cache_dir(self) -> Path:
        if self._cache_dir is None:
            self._cache_dir = Settings.from_env().cache_dir
        return self._cache_dir

    def facts(self) -> Facts:
        with self._lock:
            if self._facts is None:
                self._facts = collect(cache_dir=self.cache_dir)
            return self._facts

    def status(self, backend: Checked) -> BackendStatus:
        name = backend.NAME
        with self._lock:
            cached = self._statuses.get(name)
            if cached is None:
                findings = self.preflight(backend) + self.cached_failures(backend)
                cached = self._statuses[name] = BackendStatus.of(name, findings)
            return cached

    def preflight(self, backend: Checked) -> list[Finding]:
        """The pre-flight checks' findings for this backend on this process's facts."""

        def run() -> list[Finding]:
            return list(run_checks(self.facts(), backend.NAME))

        return guarded(backend.NAME, backend.TITLE, run)

    def cached_failures(self, backend: Checked) -> list[Finding]:
        """A gdn-cached-failure finding when the failure cache holds a failure of this backend here."""
        module = backend.MODULE
        if module is None:
            return []
        return guarded(backend.NAME, backend.TITLE, lambda: self._cached_failure(backend, module))

    def _cached_failure(self, backend: Checked, module: str) -> list[Finding]:
        records = _failure_cache(self.cache_dir).failures(self.facts().fingerprint, modules=(module,))
        return [self.op_record(backend, record) for record in records]

    @staticmethod
    def op_record(backend: Checked, record: FailureRecord) -> Finding:
        """``gdn-cached-failure`` for the op's recorded failure of ``backend``."""
        return record_finding("gdn-cached-failure", backend.NAME, backend.TITLE, record)

    def record_failure(self, backend: Checked, findings: Sequence[Finding], log_path: str | None) -> None:
        """Write the failure to the failure cache (best effort) and forget the cached status."""
        with self._lock:
            self._statuses.pop(backend.NAME, None)
        if backend.MODULE is None:
            return
        module = backend.MODULE

        def write() -> list[Finding]:
            _failure_cache(self.cache_dir).record_failure(
                module, self.facts().fingerprint, list(findings), log_path
            )
            return []

        for problem in guarded(backend.NAME, backend.TITLE, write):
            log.warning("jitguard: could not record the failure of %s: %s", module, problem.cause)

    def clear(self) -> None:
        with self._lock:
            self._statuses.clear()


def record_finding(code: str, backend: str, title: str, record: FailureRecord) -> Finding:
    """The finding ``code`` (a cached-failure code) that a recorded failure becomes at a later start."""
    return cached_failure(
        code,
        backend=backend,
        title=title,
        module=record.module,
        fingerprint=record.fingerprint,
        earlier=record.findings,
        log_path=record.log_path,
        created=record.created,
    )


def _failure_cache(cache_dir: Path) -> FailureCache:
    return FailureCache(cache_dir, ttl=ttl_from_env())
