"""This process's facts, collected once and at most ``JITGUARD_PREFLIGHT_TIMEOUT`` long: the one provider the
engine plugins (every vLLM and SGLang choice) and FlashInfer's build hook judge on, so a verdict and the record
of a build failure carry the same fingerprint.

A collection that failed or hung is reported once (``jitguard-fault``); every later ask raises
``AlreadyReported`` at once, and the caller keeps the engine's own behaviour (docs/failsafe.md). An explicit
environment other than this process's (``jitguard build`` sets the arch list for its build) gets facts of its
own, collected once per environment.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from jitguard.boundary.failsafe import AlreadyReported, report_fault, with_deadline
from jitguard.config import Settings, default_cache_dir
from jitguard.facts import collect

if TYPE_CHECKING:
    from jitguard.facts import Facts

log = logging.getLogger("jitguard.engine")

FactsProvider = Callable[[], "Facts"]
PREFLIGHT = "jitguard's FlashInfer pre-flight"


def collect_here() -> Facts:
    """``facts.collect`` for this process's environment and cache dir."""

    return collect(cache_dir=Settings.from_env().cache_dir)


class ProcessFacts:
    """The facts collected at most once, within the pre-flight deadline (``provider``: how; default
    ``collect_here``)."""

    def __init__(self, provider: FactsProvider | None = None) -> None:
        self._provider = provider or collect_here
        self._facts: Facts | None = None
        self._env: dict[str, str] | None = None  # this process's environment when they were collected
        self._failed = False
        self._lock = threading.RLock()
        self.seconds = 0.0  # how long the one collection took (the start ledger's ``facts`` phase)

    def get(self) -> Facts:
        with self._lock:
            if self._facts is not None:
                return self._facts
            if self._failed:
                raise AlreadyReported(PREFLIGHT)
            started = time.monotonic()
            self._env = dict(os.environ)
            try:
                self._facts = with_deadline(PREFLIGHT, self._provider)
            except Exception as exc:
                self._failed = True
                report_fault(PREFLIGHT, "the engine's own choices stand, unguarded", exc)
                raise AlreadyReported(PREFLIGHT) from exc
            self.seconds = time.monotonic() - started
            # One line per process: which environment the verdicts (and the failure cache) are keyed on.
            log.info(
                "jitguard: this host's facts for FlashInfer's JIT paths, in %.1f s (fingerprint %s)",
                self.seconds,
                self._facts.fingerprint,
            )
            return self._facts

    def probe_seconds(self) -> Mapping[str, float]:
        """Each probe's seconds in the one collection (empty before it, or where it failed)."""
        with self._lock:
            return dict(self._facts.seconds) if self._facts is not None else {}

    def serves(self, env: Mapping[str, str]) -> bool:
        """Whether these facts are ``env``'s: not collected yet, or collected in that very environment."""
        with self._lock:
            return self._env is None or self._env == dict(env)


_lock = threading.Lock()
_current = ProcessFacts()
_by_env: dict[tuple[tuple[str, str], ...], Facts] = {}


def process_facts() -> ProcessFacts:
    """This process's provider."""
    return _current


def replace(provider: FactsProvider | None = None) -> ProcessFacts:
    """A fresh provider for this process (``provider``: how to collect; None: this process's own collection),
    forgetting what was collected (a plugin handed other facts; tests)."""
    global _current
    with _lock:
        _current = ProcessFacts(provider)
        return _current


def facts_for(env: Mapping[str, str] | None = None) -> Facts:
    """The facts of ``env`` (default: this process's): the process's provider while the environment is the one
    it collected in, else one collection per environment (an engine loads dozens of modules at start;
    ``jitguard build`` sets its own variables)."""
    here = dict(os.environ)
    wanted = here if env is None else dict(env)
    current = process_facts()
    if wanted == here and current.serves(here):
        return current.get()
    key = tuple(sorted(wanted.items()))
    with _lock:
        if key not in _by_env:
            _by_env.clear()
            _by_env[key] = collect(wanted, cache_dir=default_cache_dir(wanted))
        return _by_env[key]
