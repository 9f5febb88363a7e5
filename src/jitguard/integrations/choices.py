"""The I/O half of an engine's FlashInfer choices (``jitguard.decision.engine`` is the pure half): this
process's facts, the failure cache and the prebuilt modules, turned into a status per choice, and the guard
that applies the verdicts inside an engine (one warning per choice and process, a clear stop for a named
path that cannot work).

Every choice reads the same facts, collected once per process and at most ``JITGUARD_PREFLIGHT_TIMEOUT``
long: when that fails, it is said once and every choice stays the engine's own (docs/failsafe.md).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from jitguard.decision.engine import CACHED_FAILURE, Choice, ChoiceStatus, ChoiceUnavailable, assess, verdict
from jitguard.decision.gdn import UNVERIFIED, BackendStatus
from jitguard.findings.catalog import make
from jitguard.findings.model import Finding
from jitguard.integrations.boundary import AlreadyReported, report_fault, with_deadline

if TYPE_CHECKING:
    from jitguard.facts import Facts
    from jitguard.facts.flashinfer_modules import PrebuiltModule

log = logging.getLogger("jitguard.engine")

FactsProvider = Callable[[], "Facts"]
StatusProvider = Callable[[Choice], ChoiceStatus]
PREFLIGHT = "jitguard's FlashInfer pre-flight"


def collect_facts() -> Facts:
    """This process's facts, the GDN op's own collection (one per process for the op and every choice)."""
    from jitguard.gdn.dispatch import dispatcher

    return dispatcher().environment.facts()


class EngineFacts:
    """The facts every choice is judged on: collected at most once, within the pre-flight deadline. A
    collection that failed or hung is reported once; every later ask raises ``AlreadyReported`` at once."""

    def __init__(self, provider: FactsProvider | None = None) -> None:
        self._provider = provider or collect_facts
        self._facts: Facts | None = None
        self._failed = False
        self._lock = threading.RLock()

    def get(self) -> Facts:
        with self._lock:
            if self._facts is not None:
                return self._facts
            if self._failed:
                raise AlreadyReported(PREFLIGHT)
            started = time.monotonic()
            try:
                self._facts = with_deadline(PREFLIGHT, self._provider)
            except Exception as exc:
                self._failed = True
                report_fault(PREFLIGHT, "the engine's own choices stand, unguarded", exc)
                raise AlreadyReported(PREFLIGHT) from exc
            # One line per process: which environment the verdicts (and the failure cache) are keyed on.
            log.info(
                "jitguard: this host's facts for FlashInfer's JIT paths, in %.1f s (fingerprint %s)",
                time.monotonic() - started,
                self._facts.fingerprint,
            )
            return self._facts


def recorded_failures(facts: Facts, choice: Choice, cache_dir: Path | None = None) -> list[Finding]:
    """``flashinfer-cached-failure`` for each module of ``choice`` that failed to build or load in this same
    environment (the build hook records every FlashInfer module it saw fail, by FlashInfer's name)."""
    from jitguard.config import Settings
    from jitguard.state.failure_cache import FailureCache, ttl_from_env

    cache = FailureCache(cache_dir or Settings.from_env().cache_dir, ttl=ttl_from_env())
    found = []
    for record in cache.entries():
        if not record.failed or record.fingerprint != facts.fingerprint:
            continue
        if not record.module.startswith(choice.modules):
            continue
        codes = ", ".join(record.codes) or "no findings recorded"
        when = time.strftime("%Y-%m-%d %H:%M", time.localtime(record.created))
        evidence = [f"[{f.code}] {f.title}" for f in record.findings]
        if record.log_path:
            evidence.append(f"log: {record.log_path}")
        found.append(
            make(
                CACHED_FAILURE,
                backend="flashinfer",
                evidence=evidence,
                title=choice.title,
                module=record.module,
                fingerprint=facts.fingerprint,
                previous=f"[{codes}] at {when}",
            )
        )
    return found


def status_of(choice: Choice, facts: Facts, *, gdn: BackendStatus | None = None) -> ChoiceStatus:
    """``choice``'s status from ``facts``, the failure cache and the prebuilt modules. GDN prefill takes the
    GDN op's own status (``gdn``; default: ``backend_status('flashinfer')`` on these facts)."""
    known = recorded_failures(facts, choice)
    if choice.gdn:
        if gdn is None:
            from jitguard.gdn.dispatch import backend_status

            gdn = backend_status("flashinfer", facts=facts)
        return assess(choice, gdn.findings, known)
    from jitguard.facts.flashinfer_modules import prebuilt
    from jitguard.findings.checks import jit_preflight
    from jitguard.findings.checks_arch import for_choice
    from jitguard.findings.checks_toolchain import check_built_library

    fi = facts.flashinfer
    built = prebuilt(fi, choice.modules)
    for module in _first_per_prefix(built, choice.required):
        known.append(
            make(
                "flashinfer-module-prebuilt",
                backend="flashinfer",
                evidence=[str(module.path)],
                title=choice.title,
                module=module.name,
                path=module.path,
                source=module.source,
            )
        )
        known += check_built_library(module.path, facts.libstdcxx)
    jit_cache = bool(fi.jit_cache_version) and bool(fi.jit_cache_matches) and not fi.jit_cache_import_raises
    arch_build, arch_always = for_choice(facts, choice.key)  # the GPU arch x toolkit check, per module kind
    pre = [*jit_preflight(facts), *arch_build]
    return assess(choice, pre, [*known, *arch_always], [m.name for m in built], jit_cache=jit_cache)


def gdn_status(facts: Facts) -> BackendStatus:
    """FlashInfer GDN prefill for the engine: the GDN op's status plus the recorded failures of FlashInfer's
    own GDN modules (``gdn_prefill_sm90``, recorded by the build hook when a build in the engine failed)."""
    from jitguard.decision.engine import GDN_PREFILL
    from jitguard.gdn.dispatch import backend_status

    status = backend_status("flashinfer", facts=facts)
    known = recorded_failures(facts, GDN_PREFILL)
    return BackendStatus.of("flashinfer", [*status.findings, *known]) if known else status


def _first_per_prefix(built: Sequence[PrebuiltModule], prefixes: Sequence[str]) -> list[PrebuiltModule]:
    """One prebuilt module per required prefix: enough to check that what FlashInfer loads can load."""
    chosen: list[PrebuiltModule] = []
    for prefix in prefixes:
        match = next((m for m in built if m.name.startswith(prefix)), None)
        if match is not None and match not in chosen:
            chosen.append(match)
    return chosen


class ChoiceGuard:
    """Applies the verdicts for one engine in one process: each choice's status is taken once, its fallback
    said once; a named choice that cannot work raises ``ChoiceUnavailable``."""

    def __init__(self, engine: str, facts: EngineFacts | None = None) -> None:
        self.engine = engine
        self.facts = facts or EngineFacts()
        self._provider: StatusProvider | None = None
        self._statuses: dict[str, ChoiceStatus] = {}
        self._announced: set[str] = set()
        self._lock = threading.RLock()

    def set_facts(self, facts: EngineFacts, status: StatusProvider | None = None) -> None:
        """Judge on ``facts`` from now on (or through ``status``, a choice -> status function), afresh."""
        with self._lock:
            self.facts = facts
            self._provider = status
            self._statuses.clear()
            self._announced.clear()

    def status(self, choice: Choice) -> ChoiceStatus:
        with self._lock:
            if choice.key not in self._statuses:
                provider = self._provider or (lambda c: status_of(c, self.facts.get()))
                self._statuses[choice.key] = provider(choice)
            return self._statuses[choice.key]

    def allows(self, choice: Choice, *, named: str | None, instead: str = "") -> bool:
        """Whether the engine may keep FlashInfer for ``choice``. ``named`` says how the user asked for it
        (None: the engine picked it on its own); ``instead`` what to type to stop naming it. A fault of
        jitguard's own keeps the engine's choice (said once)."""
        with self._lock:
            try:
                judged = verdict(self.status(choice), named=named is not None)
            except AlreadyReported:
                return True
            except Exception as exc:
                report_fault(f"the check of {choice.title}", f"{self.engine}'s choice stands", exc)
                return True
            if judged.action == "refuse":
                raise ChoiceUnavailable(
                    judged.status, named or choice.named_by or "", instead or "drop it", self.engine.lower()
                )
            self._announce(judged.status, judged.action)
            return judged.action == "keep"

    def failed(self, choice: Choice, findings: Sequence[Finding]) -> None:
        """``choice`` passed pre-flight and failed on first use anyway (``findings``: the classified cause).
        From now on it cannot work in this process; said once."""
        with self._lock:
            previous = self._statuses.get(choice.key)
            known = [*(previous.findings if previous else ()), *findings]
            status = ChoiceStatus(choice, False, tuple(known), previous.prebuilt if previous else ())
            self._statuses[choice.key] = status
            if f"{choice.key}:failed" in self._announced:
                return
            # The one line for this choice: a later instance taking the fallback at init says nothing more.
            self._announced.update({f"{choice.key}:failed", f"{choice.key}:fallback"})
        f = status.primary
        what = f"[{f.code}] {f.title}" if f else "its build failed"
        log.warning(
            "jitguard: %s failed on first use: %s.%s %s uses %s from now on; the failure is recorded, so the "
            "next start takes that path at once.",
            choice.title,
            what,
            f"{f.fix_suffix()}." if f and f.fixes else "",
            self.engine,
            choice.fallback,
        )

    def _announce(self, status: ChoiceStatus, action: str) -> None:
        choice = status.choice
        key = f"{choice.key}:{action}"
        if key in self._announced:
            return
        self._announced.add(key)
        if action == "fallback":
            f = status.primary
            what = f"[{f.code}] {f.title}" if f else "jitguard's checks rule it out"
            fix = f"{f.fix_suffix()}." if f and f.fixes else ""
            log.warning(
                "jitguard: %s chose %s, but it cannot work here: %s.%s %s uses %s instead. Details: "
                "`jitguard doctor --engine %s`; to keep %s's choice: JITGUARD_DISABLE=1.",
                self.engine,
                choice.title,
                what,
                fix,
                self.engine,
                choice.fallback,
                self.engine.lower(),
                self.engine,
            )
            return
        unknown = [f for f in status.findings if f.code == UNVERIFIED]
        if unknown:  # never "passed" for a check that did not run
            log.warning(
                "jitguard: could not verify %s here: [%s] %s.%s %s's choice stands.",
                choice.title,
                unknown[0].code,
                unknown[0].title,
                unknown[0].fix_suffix(),
                self.engine,
            )
        else:
            log.debug(
                "jitguard: %s passed pre-flight here (fingerprint %s)", choice.title, _fingerprint(self)
            )


def _fingerprint(guard: ChoiceGuard) -> str:
    try:
        return guard.facts.get().fingerprint
    except Exception:
        return "unknown"
