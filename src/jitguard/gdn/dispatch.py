"""The dispatcher beside the op: asks ``jitguard.decision.gdn_resolution`` which backend runs a kind of call, runs it,
and handles a failure on first use (classified, recorded, logged once, fall through).

Cost: facts are collected once per process and only when a call could use a GPU backend; a decision is made
once per (requested backend, device type, dtype, D, head counts); after a backend's first successful call
the per-call work is one dict lookup.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from jitguard.config import Settings
from jitguard.decision import gdn_resolution as decision
from jitguard.decision.gdn_resolution import (
    OP,
    QWEN35_SPEC,
    Assessment,
    BackendStatus,
    CallSpec,
    Decision,
    TraceEntry,
)
from jitguard.errors import BackendUnavailable, JitguardError, UsageError
from jitguard.findings.catalog import make
from jitguard.findings.classify import classify_exception
from jitguard.findings.model import Finding
from jitguard.gdn.backends import GdnBackend, default_backends
from jitguard.gdn.validate import check_backend_name
from jitguard.report.text import render_explain
from jitguard.status.gdn_backends import BackendStatuses

if TYPE_CHECKING:
    from jitguard.facts import Facts
    from jitguard.gdn.call import GdnCall

log = logging.getLogger("jitguard")


@dataclass
class _Plan:
    """Per-key state: the current decision and, once its first candidate ran, the function to call."""

    decision: Decision
    run: Callable[[GdnCall], Any] | None = None


class Dispatcher:
    """Resolves and runs calls. One process-wide instance serves ``jitguard.gdn.chunk_gated_delta_rule``."""

    def __init__(
        self, backends: Sequence[GdnBackend] | None = None, environment: BackendStatuses | None = None
    ):
        self.backends: dict[str, GdnBackend] = {b.NAME: b for b in (backends or default_backends())}
        self.order = list(self.backends)  # auto tries them in the order given (default: decision.ORDER)
        self.environment = environment or BackendStatuses()
        self._plans: dict[tuple[Any, ...], _Plan] = {}
        self._failed: dict[str, tuple[Finding, ...]] = {}  # first-use failures in this process
        self._loaded: set[str] = set()
        self._logged: set[tuple[str, str]] = set()
        self._setting: tuple[str, str] | None = None
        self._lock = threading.RLock()

    # ---- the hot path -------------------------------------------------------------------------------------
    def call(self, backend: str, key: tuple[Any, ...], call: GdnCall) -> Any:
        plan = self._plans.get((backend, key))
        if plan is not None and plan.run is not None:
            return plan.run(call)
        return self._first_use(backend, key, call)

    # ---- deciding -----------------------------------------------------------------------------------------
    def requested(self, backend: str) -> tuple[str, str]:
        """(backend, where it came from). 'auto' defers to JITGUARD_GDN_BACKEND (read once per process)."""
        if backend != "auto":
            return backend, "argument"
        if self._setting is None:
            chosen = Settings.from_env().gdn_backend
            self._setting = (chosen, "JITGUARD_GDN_BACKEND") if chosen != "auto" else ("auto", "default")
        return self._setting

    def decide(
        self, backend: str, spec: CallSpec, *, without_a_call: bool = False, raise_when_blocked: bool = True
    ) -> Decision:
        """The decision for a call like ``spec``; raises BackendUnavailable when a named backend cannot run
        (unless ``raise_when_blocked`` is False: then the decision's backend is 'none').
        ``without_a_call``: no tensors prove torch is there (resolve, explain, doctor), so every backend's
        environment is checked, the torch backend's too."""
        requested, source = self.requested(backend)
        if requested != "auto" and requested not in self.backends:
            check_backend_name(requested)
            raise UsageError(f"backend {requested!r} is not registered with this dispatcher")
        named = requested if requested != "auto" else None
        assessed = self.assess(spec, named=named, every_environment=without_a_call)
        return decision.decide(
            assessed, spec, requested=requested, source=source, raise_when_blocked=raise_when_blocked
        )

    def assess(
        self, spec: CallSpec, *, named: str | None = None, every_environment: bool = False
    ) -> list[Assessment]:
        """Every backend's findings for a call like ``spec``, in auto order. Input constraints first: they
        are free, and a CPU call then never probes the GPU environment; a ``named`` backend gets every
        finding, so a strict error says all that stands in its way. A backend with nothing to build (torch)
        is checked against the environment only with ``every_environment``: a real call's tensors already
        prove torch is there."""
        out = []
        for name in self.order:
            b = self.backends[name]
            found = list(b.input_findings(spec))
            warnings: tuple[Finding, ...] = ()
            if (name == named or not any(f.blocking for f in found)) and (
                b.MODULE is not None or every_environment
            ):
                env = list(self.environment.status(b).findings) + list(self._failed.get(name, ()))
                found = env + found
                warnings = tuple(f for f in env if not f.blocking)
            out.append(Assessment(name, tuple(f for f in found if f.blocking), warnings))
        return out

    def decisions(self) -> list[Decision]:
        with self._lock:
            return [p.decision for p in self._plans.values()]

    # ---- first use ----------------------------------------------------------------------------------------
    def _first_use(self, backend: str, key: tuple[Any, ...], call: GdnCall) -> Any:
        with self._lock:
            plan = self._plans.get((backend, key))
            if plan is None:
                plan = self._plans[(backend, key)] = _Plan(self.decide(backend, _spec_from_key(key)))
            if plan.run is not None:
                return plan.run(call)
            while plan.decision.candidates:
                b = self.backends[plan.decision.backend]
                stage = "load"
                try:
                    if b.NAME not in self._loaded:
                        b.load()
                        self._loaded.add(b.NAME)
                    prepare = getattr(b, "prepare", None)
                    if prepare is not None:  # build what this kind of call needs (FlashInfer's variants)
                        prepare(call)
                    stage = "launch"
                    result = b.run(call)
                except Exception as exc:
                    if b.MODULE is None or isinstance(exc, UsageError) or _is_out_of_memory(exc):
                        raise  # our own backend or the caller's problem: not a reason to switch backends
                    findings = self._record(b, stage, exc, plan)
                    if plan.decision.requested != "auto":
                        del self._plans[(backend, key)]  # the next call decides again and names it again
                        alternative = decision.alternative(self.assess(plan.decision.spec), exclude=b.NAME)
                        raise BackendUnavailable(OP, b.NAME, findings, alternative) from exc
                    continue
                plan.decision = _proven(plan.decision)
                plan.run = b.run
                self._announce(plan.decision)
                return result
            raise BackendUnavailable(OP, "auto", [f for e in plan.decision.trace for f in e.findings])

    def _record(self, b: GdnBackend, stage: str, exc: BaseException, plan: _Plan) -> tuple[Finding, ...]:
        rest = [c for c in plan.decision.candidates if c != b.NAME]
        alternative = (
            rest[0] if rest else decision.alternative(self.assess(plan.decision.spec), exclude=b.NAME)
        ) or "torch"
        findings = classify_exception(
            b.NAME, b.TITLE, stage, exc, alternative=alternative, facts=self._facts_or_none()
        )
        self._failed[b.NAME] = findings
        self.environment.record_failure(b, findings, getattr(exc, "log_path", None))
        primary = decision.primary_finding(findings)
        if (b.NAME, primary.code) not in self._logged:
            self._logged.add((b.NAME, primary.code))
            then = f" Falling back to {rest[0]}." if rest and plan.decision.requested == "auto" else ""
            log.warning(
                "jitguard: %s failed on first use [%s]: %s%s%s",
                b.TITLE,
                primary.code,
                primary.cause,
                primary.fix_suffix(),
                then,
            )
        # Every plan that counted on this backend must be re-made; this one continues with its next candidate.
        for other_key, other in list(self._plans.items()):
            if other is not plan and b.NAME in other.decision.candidates:
                del self._plans[other_key]
        plan.decision = decision.after_failure(plan.decision, b.NAME, stage, findings)
        return findings

    def _facts_or_none(self) -> Facts | None:
        try:
            return self.environment.facts()
        except Exception:  # the classifier works without facts; only its fixes are less specific
            log.debug("jitguard: facts unavailable while classifying a failure", exc_info=True)
            return None

    def _announce(self, made: Decision) -> None:
        """One warning per process when an accelerator call runs on a fallback."""
        chosen = self.backends[made.backend]
        if made.requested != "auto" or made.spec.device_type == "cpu" or self.order[0] == chosen.NAME:
            return
        key = ("fallback", f"{chosen.NAME}/{made.spec.device_type}")
        if key in self._logged:
            return
        self._logged.add(key)
        skipped = [e for e in made.trace if e.outcome in ("skipped", "failed")]
        if not skipped:
            return
        # Every skipped backend with its cause and first fix: with FlashInfer and Triton both blocked, one line
        # says both, so neither fix is learned only after the other.
        primaries = [
            (e.backend, decision.primary_finding(e.findings) if e.findings else None) for e in skipped
        ]
        detail = "; ".join(f"{name} [{f.code}] {f.title}" if f else name for name, f in primaries)
        notice = make(
            "gdn-fallback-in-use",
            backend=chosen.NAME,
            evidence=[f"{e.backend}: {e.reason}" for e in skipped],
            device=made.spec.device_type,
            title=chosen.TITLE,
            skipped=detail,
        )
        for plan in self._plans.values():
            if plan.decision is made:
                plan.decision = _with_note(made, TraceEntry(chosen.NAME, "note", notice.title, (notice,)))
        fixes = [(name, f) for name, f in primaries if f is not None and f.fixes]
        if len(fixes) == 1:
            fix = fixes[0][1].fix_suffix()
        else:
            fix = "".join(f" Fix {name}: {f.fixes[0].render()}" for name, f in fixes)
        log.warning("jitguard: [%s] %s. %s%s", notice.code, notice.title, notice.cause, fix)

    def failed_here(self, name: str) -> tuple[Finding, ...]:
        """The findings of ``name``'s failure on first use in this process (empty when none)."""
        return self._failed.get(name, ())

    def reset(self) -> None:
        with self._lock:
            self._plans.clear()
            self._failed.clear()
            self._logged.clear()
            self._setting = None
            self.environment.clear()


def _proven(made: Decision) -> Decision:
    return Decision(made.candidates, made.trace, made.requested, made.source, made.spec, proven=True)


def _with_note(made: Decision, note: TraceEntry) -> Decision:
    return Decision(made.candidates, (*made.trace, note), made.requested, made.source, made.spec, made.proven)


def _is_out_of_memory(exc: BaseException) -> bool:
    return type(exc).__name__ == "OutOfMemoryError" or "CUDA out of memory" in str(exc)


def _spec_from_key(key: tuple[Any, ...]) -> CallSpec:
    device_type, dtype, head_dim, hq, hk, hv = key
    return CallSpec(
        str(device_type), str(dtype).replace("torch.", ""), int(head_dim), int(hq), int(hk), int(hv)
    )


# ---- the process-wide dispatcher and the public functions ------------------------------------------------
_DISPATCHER: Dispatcher | None = None
_DISPATCHER_LOCK = threading.Lock()


def dispatcher() -> Dispatcher:
    global _DISPATCHER
    if _DISPATCHER is None:
        with _DISPATCHER_LOCK:
            if _DISPATCHER is None:
                _DISPATCHER = Dispatcher()
    return _DISPATCHER


def reset() -> None:
    """Forget plans, statuses, first-use failures and the JITGUARD_GDN_BACKEND setting (re-read next call)."""
    global _DISPATCHER
    with _DISPATCHER_LOCK:
        _DISPATCHER = None


def backend_status(name: str, *, facts: Facts | None = None) -> BackendStatus:
    """Can backend ``name`` run here at all (any input)? Pre-flight findings + cached failures + failures on
    first use in this process. With ``facts`` given, those facts are used instead of this process's."""
    d = dispatcher()
    if name not in d.backends:
        check_backend_name(name)
    b = d.backends[name]
    env = d.environment if facts is None else BackendStatuses(facts=facts, cache_dir=d.environment.cache_dir)
    status = env.status(b) if b.MODULE is not None else BackendStatus(name, True, ())
    failed = d.failed_here(name)
    if failed:
        return BackendStatus.of(name, list(status.findings) + list(failed))
    return status


def resolve(requested: str = "auto", spec: CallSpec | None = None, *, facts: Facts | None = None) -> Decision:
    """Decide (without running anything) which backend a call of ``spec`` (default: a Qwen3.5 layer on CUDA,
    bf16) would use. A named backend that cannot run raises ``BackendUnavailable``."""
    requested = check_backend_name(requested)
    return _with_facts(facts).decide(requested, spec or QWEN35_SPEC, without_a_call=True)


def explain(spec: CallSpec | None = None) -> str:
    """The decision trace: every kind of call this process made, then what ``auto`` picks for ``spec``
    (default: a Qwen3.5 layer on CUDA, bf16) with each backend's status here."""
    auto: Decision | str
    try:
        auto = outlook(spec)
    except JitguardError as exc:  # a malformed JITGUARD_GDN_BACKEND: the text says which and what to type
        auto = str(exc)
    return render_explain(dispatcher().decisions(), auto)


def outlook(spec: CallSpec | None = None, *, facts: Facts | None = None) -> Decision:
    """What a call of ``spec`` (default: a Qwen3.5 layer on CUDA, bf16) with ``backend='auto'`` gets here,
    JITGUARD_GDN_BACKEND included; never raises for a blocked backend: the decision's backend is then 'none'
    (doctor and `jitguard gdn explain` report it and exit 1). A malformed JITGUARD_GDN_BACKEND raises
    ConfigError."""
    return _with_facts(facts).decide(
        "auto", spec or QWEN35_SPEC, without_a_call=True, raise_when_blocked=False
    )


def describe_auto(*, facts: Facts | None = None, spec: CallSpec | None = None) -> dict[str, Any]:
    """``outlook(spec)`` as JSON, for `jitguard doctor` and `jitguard gdn explain` (default spec: a Qwen3.5
    layer on CUDA)."""
    return outlook(spec, facts=facts).to_json()


def _with_facts(facts: Facts | None) -> Dispatcher:
    """The process-wide dispatcher, or one like it that judges from ``facts`` instead of this process's."""
    d = dispatcher()
    if facts is None:
        return d
    return Dispatcher(
        list(d.backends.values()), BackendStatuses(facts=facts, cache_dir=d.environment.cache_dir)
    )
