"""The fail-safe boundary (docs/failsafe.md: "never worse than without jitguard"): the one place that keeps
jitguard's own faults out of the code it runs inside (an engine, FlashInfer).

Every hook body runs through ``shielded``: an exception that is jitguard's own (a missing dependency, a
probe that raises, a malformed setting, an engine internal that moved) is logged once with the code
``jitguard-fault``, the cause and the fix, and the hook returns what the engine would have done without
jitguard. Verdicts meant for the engine (a classified build failure, a refusal of an explicitly requested
backend) pass through: they are not faults. ``with_deadline`` bounds work that could hang (a probe of a
wedged driver) so an engine never waits on jitguard for longer than ``JITGUARD_PREFLIGHT_TIMEOUT``.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import TypeVar

from jitguard.config import read
from jitguard.errors import BackendUnavailable, BuildFailed, ConfigError
from jitguard.findings.model import Finding

T = TypeVar("T")
log = logging.getLogger("jitguard")
DEFAULT_DEADLINE = 120.0  # seconds; facts take ~1-2 s, the trial link has its own 60 s limit
# Raised on purpose for the engine to see: jitguard's verdicts, not jitguard's faults.
VERDICTS: tuple[type[BaseException], ...] = (BackendUnavailable, BuildFailed)

_reported: set[tuple[str, str]] = set()
_reported_lock = threading.Lock()


class AlreadyReported(Exception):
    """A fault that was already said once (e.g. the pre-flight that hung): whoever meets it again keeps the
    engine's own choice without another warning."""


class DeadlineExceeded(Exception):
    def __init__(self, what: str, seconds: float) -> None:
        super().__init__(f"{what} did not finish within {seconds:g} s (JITGUARD_PREFLIGHT_TIMEOUT)")


def report_fault(where: str, then: str, exc: BaseException, *, once_per: str | None = None) -> Finding:
    """The jitguard-fault finding for ``exc``, logged once per process for each place (or ``once_per``: a
    coarser key, e.g. one kind of work on many kernels) and kind of error."""
    # lazy: the shield must import even where the installation a fault names is broken
    from jitguard.findings.checks_jitguard import fault

    finding = fault(where, then, exc)
    key = (once_per or where, type(exc).__name__)
    with _reported_lock:
        first = key not in _reported and not isinstance(exc, AlreadyReported)
        _reported.add(key)
    if first:
        log.warning(
            "jitguard: [%s] %s. %s%s To turn jitguard off: JITGUARD_DISABLE=1.",
            finding.code,
            finding.title,
            finding.cause,
            finding.fix_suffix(),
        )
        log.debug("jitguard: the fault in %s", where, exc_info=(type(exc), exc, exc.__traceback__))
    return finding


def shielded(where: str, then: str, work: Callable[[], T], stock: Callable[[], T]) -> T:
    """``work()``; on a fault of jitguard's, ``stock()`` (what the engine does without jitguard).
    ``stock`` runs outside the handler, so its own exceptions are the engine's, unchanged."""
    try:
        return work()
    except VERDICTS:
        raise
    except Exception as exc:
        report_fault(where, then, exc)
    return stock()


def deadline_seconds() -> float:
    """JITGUARD_PREFLIGHT_TIMEOUT (e.g. '90s', '2m'); a malformed value is the default (and said once)."""

    try:
        value = read("JITGUARD_PREFLIGHT_TIMEOUT")
    except ConfigError as exc:
        report_fault("reading JITGUARD_PREFLIGHT_TIMEOUT", f"using {DEFAULT_DEADLINE:g} s", exc)
        return DEFAULT_DEADLINE
    return DEFAULT_DEADLINE if value is None else float(value)


def with_deadline(what: str, work: Callable[[], T], seconds: float | None = None) -> T:
    """``work()`` in a daemon thread, waited for at most ``seconds``; DeadlineExceeded after that (the
    thread is left to finish or hang on its own: it holds no lock the engine needs)."""
    limit = deadline_seconds() if seconds is None else seconds
    box: dict[str, object] = {}

    def run() -> None:
        try:
            box["value"] = work()
        except BaseException as exc:  # handed to the caller's thread below
            box["error"] = exc

    thread = threading.Thread(target=run, name=f"jitguard: {what}", daemon=True)
    thread.start()
    thread.join(limit)
    if thread.is_alive():
        raise DeadlineExceeded(what, limit)
    if "error" in box:
        raise box["error"]  # type: ignore[misc]
    return box["value"]  # type: ignore[return-value]
