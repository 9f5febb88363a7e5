"""The one guard that applies the verdicts on an engine's FlashInfer choices inside the engine (``ChoiceGuard``:
vLLM's choices, GDN prefill included, and SGLang's linear-attention phases): each choice's status asked once of
the status service (``status.engine_choices``), one warning per choice and process, a clear stop for a named
path that cannot work.

Every choice reads the same facts (``boundary.process_facts``: once per process, at most
``JITGUARD_PREFLIGHT_TIMEOUT`` long): when that fails, it is said once and every choice stays the engine's
own (docs/failsafe.md).
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from jitguard.boundary.failsafe import AlreadyReported, report_fault
from jitguard.boundary.process_facts import ProcessFacts, process_facts
from jitguard.config import Settings
from jitguard.decision.engine_verdicts import (
    Choice,
    ChoiceStatus,
    ChoiceUnavailable,
    ChoiceVerdict,
    assess,
    primary_of,
    verdict,
)
from jitguard.decision.gdn_resolution import UNVERIFIED, BackendStatus
from jitguard.findings.model import Finding
from jitguard.ledger import tally
from jitguard.status.engine_choices import gdn_status, status_of

log = logging.getLogger("jitguard.engine")

StatusProvider = Callable[[Choice], ChoiceStatus]
GdnProvider = Callable[[], BackendStatus]


@dataclass(frozen=True)
class Ask:
    """The engine chose FlashInfer for ``choice``; ``named``: how the user asked for it (None: the engine
    picked it on its own); ``instead``: what to type to stop naming it."""

    choice: Choice
    named: str | None = None
    instead: str = ""


class ChoiceGuard:
    """Applies the verdicts for one engine in one process: FlashInfer's GDN status is looked at once
    (``looks``), each choice's status taken once, its fallback said once; a named choice that cannot work
    raises ``ChoiceUnavailable``; a fault of jitguard's own keeps the engine's choice (said once).

    ``settings``: the engine entry's (its plugin's ``register`` builds them once; default: this process's
    environment, read when a status is first asked for). ``gdn`` replaces how FlashInfer's GDN status is
    obtained (its findings are then taken as they are); ``status`` how every choice's status is (tests)."""

    def __init__(
        self,
        engine: str,
        facts: ProcessFacts | None = None,
        *,
        gdn: GdnProvider | None = None,
        status: StatusProvider | None = None,
        settings: Settings | None = None,
    ) -> None:
        self.engine = engine
        self._lock = threading.RLock()
        self.set_facts(facts, status, gdn=gdn, settings=settings)

    def set_facts(
        self,
        facts: ProcessFacts | None = None,
        status: StatusProvider | None = None,
        *,
        gdn: GdnProvider | None = None,
        settings: Settings | None = None,
    ) -> None:
        """Judge on ``facts`` (default: this process's provider) and ``settings`` from now on, afresh."""
        with self._lock:
            self._facts = facts
            self._settings = settings
            self._provider = status
            self._gdn_provider = gdn
            self._gdn: BackendStatus | None = None
            self._statuses: dict[str, ChoiceStatus] = {}
            self._announced: set[str] = set()
            self._faulted: set[str] = set()
            self._failed: set[str] = set()  # choice keys that failed in this process (first use, a warmup)
            self._proven: set[str] = set()  # choice keys that ran in this process
            self.looks = 0

    @property
    def facts(self) -> ProcessFacts:
        return self._facts or process_facts()

    def use(self, settings: Settings) -> None:
        """Read ``settings`` (the engine entry's) from now on; what was judged stays."""
        with self._lock:
            self._settings = settings

    @property
    def settings(self) -> Settings:
        with self._lock:
            if self._settings is None:
                self._settings = Settings.from_env()
            return self._settings

    def gdn(self) -> BackendStatus:
        """FlashInfer's GDN status, looked at once."""
        with self._lock:
            if self._gdn is None:
                self.looks += 1
                self._gdn = (
                    self._gdn_provider()
                    if self._gdn_provider
                    else gdn_status(self.facts.get(), self.settings.cache_dir)
                )
            return self._gdn

    def status(self, choice: Choice) -> ChoiceStatus:
        with self._lock:
            if choice.key not in self._statuses:
                facts_before = self.facts.seconds
                started = time.perf_counter()
                self._statuses[choice.key] = self._status(choice)
                # The verdict's own time: the facts it collected on the way are their own phase.
                tally.phase("verdict", time.perf_counter() - started - (self.facts.seconds - facts_before))
            return self._statuses[choice.key]

    def _status(self, choice: Choice) -> ChoiceStatus:
        if self._provider is not None:
            return self._provider(choice)
        if not choice.gdn:
            return status_of(choice, self.facts.get(), self.settings.cache_dir)
        if self._gdn_provider is not None:
            base = self.gdn()
            status = assess(choice, base.findings)
            if not base.usable and choice.decided_by is None:  # unusable as given, reasons or not
                return dataclasses.replace(status, usable=False)
            return status
        return status_of(choice, self.facts.get(), self.settings.cache_dir, gdn=self.gdn())

    def judge(self, choice: Choice, *, named: str | None) -> ChoiceVerdict | None:
        """The verdict on the engine's choice of FlashInfer for ``choice``; None when jitguard's own check
        failed (said once): the engine's choice stands."""
        with self._lock:
            if choice.key in self._faulted:
                return None
            try:
                return verdict(self.status(choice), named=named is not None)
            except AlreadyReported:
                self._faulted.add(choice.key)
            except Exception as exc:
                self._faulted.add(choice.key)
                report_fault(f"the check of {choice.title}", f"{self.engine}'s choice stands", exc)
            return None

    def allows(self, choice: Choice, *, named: str | None, instead: str = "", asked: str = "") -> bool:
        """Whether the engine may keep FlashInfer for ``choice`` (see ``settle``)."""
        return self.settle([Ask(choice, named, instead)], asked=asked)[choice.key]

    def settle(self, asks: Sequence[Ask], *, asked: str = "") -> dict[str, bool]:
        """choice key -> whether the engine may keep FlashInfer, for each choice it made. The fallbacks are said
        in one line (``asked``: how the engine came to its choice, e.g. ``--gdn-prefill-backend auto``); then
        the first named choice that cannot work raises ``ChoiceUnavailable``."""
        with self._lock:
            judged = [(ask, self.judge(ask.choice, named=ask.named)) for ask in asks]
            self._announce([v for _, v in judged if v is not None], asked)
            for ask, v in judged:
                if v is not None and v.action == "refuse":
                    named = ask.named or ask.choice.named_by or ""
                    raise ChoiceUnavailable(v.status, named, ask.instead or "drop it", self.engine.lower())
            return {ask.choice.key: v is None or v.action == "keep" for ask, v in judged}

    def failed(self, choice: Choice, findings: Sequence[Finding], *, announce: bool = True) -> None:
        """``choice`` passed pre-flight and failed on first use anyway (``findings``: the classified cause).
        From now on it cannot work in this process; said once (``announce=False``: the caller stops the start
        and says it)."""
        with self._lock:
            previous = self._statuses.get(choice.key)
            known = [*(previous.findings if previous else ()), *findings]
            status = ChoiceStatus(choice, False, tuple(known), previous.prebuilt if previous else ())
            self._statuses[choice.key] = status
            self._failed.add(choice.key)
            if f"{choice.key}:failed" in self._announced or not announce:
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

    def known_failed(self, choice: Choice) -> bool:
        """Whether ``choice`` failed in this process (``failed``)."""
        with self._lock:
            return choice.key in self._failed

    def proven(self, choice: Choice, where: str, *, record: str | None = None) -> None:
        """``choice`` ran in this process (``where``: e.g. the engine's own warmup): proven, not presumed;
        ``record``: it was not called, a pass of its proof is recorded under this key (the same packages,
        installed files, driver and GPU). Said once."""
        with self._lock:
            if choice.key in self._proven:
                return
            self._proven.add(choice.key)
        if record is None:
            log.info("jitguard: %s ran in %s's %s: proven here.", choice.title, self.engine, where)
            return
        log.info(
            "jitguard: %s passed its proof at an earlier start with the same packages, installed files, "
            "driver and GPU (key %s): proven by record, no call at %s.",
            choice.title,
            record,
            where,
        )

    def is_proven(self, choice: Choice) -> bool:
        with self._lock:
            return choice.key in self._proven

    def _announce(self, verdicts: Sequence[ChoiceVerdict], asked: str) -> None:
        fresh = [v for v in verdicts if f"{v.choice.key}:{v.action}" not in self._announced]
        self._announced.update(f"{v.choice.key}:{v.action}" for v in fresh)
        moved = [v for v in fresh if v.action == "fallback"]
        if moved:
            f = primary_of([x for v in moved for x in v.status.findings])
            log.warning(
                "jitguard: %s chose %s%s, but it cannot work here: %s.%s %s uses %s instead. Details: "
                "`jitguard doctor --engine %s`; to keep %s's choice: JITGUARD_DISABLE=1.",
                self.engine,
                joined_titles([v.choice.title for v in moved]),
                f" ({asked})" if asked else "",
                f"[{f.code}] {f.title}" if f else "jitguard's checks rule it out",
                f"{f.fix_suffix()}." if f and f.fixes else "",
                self.engine,
                moved[0].choice.fallback,
                self.engine.lower(),
                self.engine,
            )
            if any(v.choice.gdn for v in moved):
                self._triton_blocked(f)
        kept = [v for v in fresh if v.action == "keep"]
        unknown = [f for v in kept for f in v.status.findings if f.code == UNVERIFIED]
        if unknown:  # never "passed" for a check that did not run
            log.warning(
                "jitguard: could not verify %s here: [%s] %s.%s %s's choice stands.",
                joined_titles([v.choice.title for v in kept]),
                unknown[0].code,
                unknown[0].title,
                unknown[0].fix_suffix(),
                self.engine,
            )
        elif kept:
            log.log(
                logging.INFO if any(v.choice.gdn for v in kept) else logging.DEBUG,
                "jitguard: %s passed pre-flight here; FlashInfer's nvcc JIT builds in this process are "
                "supervised and shared by the ranks.",
                joined_titles([v.choice.title for v in kept]),
            )

    def _triton_blocked(self, flashinfer: Finding | None) -> None:
        """Once per process: one error line more when the Triton/FLA path the engine now takes cannot build
        Triton's launcher here either (naming both blocks and both fixes)."""
        if "triton" in self._announced:
            return
        self._announced.add("triton")
        # lazy: under the guard's shield where it runs, not with the plugins' import
        from jitguard.integrations.triton_blocked import warn_if_blocked

        try:
            facts = self.facts.get()
        except Exception:  # the facts' collection reports its own failure, once
            return
        warn_if_blocked(self.engine, "GDN prefill", facts, flashinfer)


def joined_titles(titles: Sequence[str]) -> str:
    """``FlashInfer linear attention decode, verify`` for the titles of several choices."""
    words = [t.split(" ") for t in titles]
    common = 0
    while all(len(w) > common + 1 and w[common] == words[0][common] for w in words):
        common += 1
    rest = [" ".join(w[common:]) for w in words]
    return " ".join([*words[0][:common], ", ".join(dict.fromkeys(rest))])
