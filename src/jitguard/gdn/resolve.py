"""Backend resolution for the GDN prefill op: which backend runs a call, why the others were skipped, and what
happens when a backend fails on first use.

Policy (DESIGN.md "Backend policy"): ``auto`` tries flashinfer -> triton -> torch, skipping a backend whose
input constraints the call violates, that has an ``error`` finding from the pre-flight checks, or that has
a cached failure for this environment's fingerprint. A failure on first use (build, load, first launch) is
classified, recorded in the failure cache, logged once with its code and fix, and the call falls through to
the next backend with the same inputs. A named backend (argument or ``JITGUARD_GDN_BACKEND``) is strict: it
raises ``BackendUnavailable`` carrying the findings.

Cost: facts are collected once per process and only when a call could use a GPU backend; a plan is made
once per (requested backend, device type, dtype, D, head counts); after a backend's first successful call
the per-call work is one dict lookup.
"""

from __future__ import annotations

import logging
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from jitguard.errors import BackendUnavailable, JitguardError, UsageError
from jitguard.findings.catalog import make
from jitguard.findings.model import Finding, sort_findings
from jitguard.gdn.backends import GdnBackend, default_backends
from jitguard.gdn.convention import QWEN35_SPEC, CallSpec

if TYPE_CHECKING:
    from jitguard.facts import Facts

OP = "GDN prefill"
log = logging.getLogger("jitguard")
# Codes that say "it failed" without saying why; the log line prefers a classified cause over them.
_GENERIC = frozenset({"gdn-first-use-failed", "gdn-launch-failed", "build-failed"})


@dataclass(frozen=True)
class BackendStatus:
    """Can this backend run in this environment (any input)? ``findings`` say why not, or carry warnings."""

    name: str
    usable: bool
    findings: tuple[Finding, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "usable": self.usable, "findings": [f.to_json() for f in self.findings]}


@dataclass(frozen=True)
class TraceEntry:
    """One backend's fate in a decision: 'chosen', 'skipped', 'failed' (on first use) or 'fallback' (usable,
    not needed)."""

    backend: str
    outcome: str
    reason: str
    findings: tuple[Finding, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "backend": self.backend,
            "outcome": self.outcome,
            "reason": self.reason,
            "findings": [f.to_json() for f in self.findings],
        }


@dataclass(frozen=True)
class Decision:
    """The backend chosen for one kind of call and the trace of why."""

    backend: str
    trace: tuple[TraceEntry, ...]
    requested: str = "auto"
    source: str = "default"  # 'argument', 'JITGUARD_GDN_BACKEND' or 'default'
    spec: CallSpec = QWEN35_SPEC
    proven: bool = False  # True once the backend ran successfully in this process

    def render(self) -> str:
        how = "strict" if self.requested != "auto" else "auto: flashinfer -> triton -> torch"
        lines = [
            f"GDN prefill for {self.spec.describe()}",
            f"  requested: {self.requested} (from {self.source}; {how})",
            f"  chosen:    {self.backend}" + ("" if self.proven else " (not run yet in this process)"),
        ]
        for entry in self.trace:
            lines.append(f"  - {entry.backend:<10} {entry.outcome:<8} {entry.reason}")
            for f in sort_findings(list(entry.findings)):
                lines.append(f"      [{f.code}] ({f.severity}) {f.title}: {f.cause}")
                for fix in f.fixes[:2]:
                    lines.append(f"        Fix: {fix.render()}")
        return "\n".join(lines)

    def to_json(self) -> dict[str, Any]:
        return {
            "backend": self.backend,
            "requested": self.requested,
            "source": self.source,
            "proven": self.proven,
            "spec": {
                "device_type": self.spec.device_type,
                "dtype": self.spec.dtype,
                "head_dim": self.spec.head_dim,
                "num_q_heads": self.spec.num_q_heads,
                "num_k_heads": self.spec.num_k_heads,
                "num_v_heads": self.spec.num_v_heads,
                "layout": self.spec.layout,
            },
            "trace": [e.to_json() for e in self.trace],
        }


def _guarded(backend: str, title: str, probe: Callable[[], list[Finding]]) -> list[Finding]:
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


class Environment:
    """Backend status in this environment: pre-flight findings on this process's facts plus the failure cache.

    Facts are collected at most once (and only when a status is asked for); statuses are cached per backend
    until ``record_failure`` or ``clear``.
    """

    def __init__(self, *, facts: Facts | None = None, cache_dir: Path | None = None) -> None:
        self._facts = facts
        self._cache_dir = cache_dir
        self._statuses: dict[str, BackendStatus] = {}
        self._lock = threading.RLock()

    @property
    def cache_dir(self) -> Path:
        if self._cache_dir is None:
            from jitguard.config import Settings

            self._cache_dir = Settings.from_env().cache_dir
        return self._cache_dir

    def facts(self) -> Facts:
        with self._lock:
            if self._facts is None:
                from jitguard.facts import collect

                self._facts = collect(cache_dir=self.cache_dir)
            return self._facts

    def status(self, backend: GdnBackend) -> BackendStatus:
        name = backend.NAME
        with self._lock:
            cached = self._statuses.get(name)
            if cached is None:
                findings = self.preflight(backend) + self.cached_failures(backend)
                usable = not any(f.severity == "error" for f in findings)
                cached = self._statuses[name] = BackendStatus(name, usable, tuple(sort_findings(findings)))
            return cached

    def preflight(self, backend: GdnBackend) -> list[Finding]:
        """The pre-flight checks' findings for this backend on this process's facts."""

        def run() -> list[Finding]:
            from jitguard.findings.checks import preflight as run_checks

            return list(run_checks(self.facts(), backend.NAME))

        return _guarded(backend.NAME, backend.TITLE, run)

    def cached_failures(self, backend: GdnBackend) -> list[Finding]:
        """A gdn-cached-failure finding when the failure cache holds a failure of this backend here."""
        module = backend.MODULE
        if module is None:
            return []
        return _guarded(backend.NAME, backend.TITLE, lambda: self._cached_failure(backend, module))

    def _cached_failure(self, backend: GdnBackend, module: str) -> list[Finding]:
        fingerprint = self.facts().fingerprint
        record = _failure_cache(self.cache_dir).get(module, fingerprint)
        if record is None:
            return []
        previous = tuple(getattr(record, "findings", ()) or ())
        codes = ", ".join(f.code for f in previous) or "no findings recorded"
        created = getattr(record, "created", None)
        when = time.strftime("%Y-%m-%d %H:%M", time.localtime(created)) if created else None
        evidence = [f"[{f.code}] {f.title}" for f in previous]
        if getattr(record, "log_path", None):
            evidence.append(f"log: {record.log_path}")
        return [
            make(
                "gdn-cached-failure",
                backend=backend.NAME,
                evidence=evidence,
                title=backend.TITLE,
                module=module,
                fingerprint=str(fingerprint)[:12],
                previous=f"[{codes}]" + (f" at {when}" if when else ""),
            )
        ]

    def record_failure(self, backend: GdnBackend, findings: Sequence[Finding], log_path: str | None) -> None:
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

        for problem in _guarded(backend.NAME, backend.TITLE, write):
            log.warning("jitguard: could not record the failure of %s: %s", module, problem.cause)

    def clear(self) -> None:
        with self._lock:
            self._statuses.clear()


@dataclass
class _Plan:
    """Mutable per-key state of the dispatcher: ordered candidates, the trace so far, and whether the first
    candidate has run successfully (then calls go straight to ``run``)."""

    requested: str
    source: str
    spec: CallSpec
    candidates: list[GdnBackend]
    trace: list[TraceEntry] = field(default_factory=list)
    proven: bool = False
    run: Callable[..., Any] | None = None

    def decision(self) -> Decision:
        chosen = self.candidates[0].NAME if self.candidates else "none"
        return Decision(chosen, tuple(self.trace), self.requested, self.source, self.spec, self.proven)


class Dispatcher:
    """Resolves and runs calls. One process-wide instance serves ``jitguard.gdn.chunk_gated_delta_rule``."""

    def __init__(self, backends: Sequence[GdnBackend] | None = None, environment: Environment | None = None):
        self.backends: dict[str, GdnBackend] = {b.NAME: b for b in (backends or default_backends())}
        self.order = list(self.backends)  # auto tries them in the order given (default: ORDER)
        self.environment = environment or Environment()
        self._plans: dict[tuple[Any, ...], _Plan] = {}
        self._failed: dict[str, tuple[Finding, ...]] = {}  # first-use failures in this process
        self._loaded: set[str] = set()
        self._logged: set[tuple[str, str]] = set()
        self._setting: tuple[str, str] | None = None
        self._lock = threading.RLock()

    # ---- the hot path -------------------------------------------------------------------------------------
    def call(self, backend: str, key: tuple[Any, ...], args: tuple[Any, ...]) -> Any:
        plan = self._plans.get((backend, key))
        if plan is not None and plan.run is not None:
            return plan.run(*args)
        return self._first_use(backend, key, args)

    # ---- planning -----------------------------------------------------------------------------------------
    def requested(self, backend: str) -> tuple[str, str]:
        """(backend, where it came from). 'auto' defers to JITGUARD_GDN_BACKEND (read once per process)."""
        if backend != "auto":
            return backend, "argument"
        if self._setting is None:
            from jitguard.config import Settings

            chosen = Settings.from_env().gdn_backend
            self._setting = (chosen, "JITGUARD_GDN_BACKEND") if chosen != "auto" else ("auto", "default")
        return self._setting

    def plan(self, backend: str, spec: CallSpec) -> _Plan:
        """Order the candidates for a call; raises BackendUnavailable when a named backend cannot run it."""
        requested, source = self.requested(backend)
        if requested != "auto":
            if requested not in self.backends:
                from jitguard.gdn.validate import check_backend_name

                check_backend_name(requested)
                raise UsageError(f"backend {requested!r} is not registered with this dispatcher")
            b = self.backends[requested]
            blocking = self._blocking(b, spec, with_environment=True)
            if blocking:
                raise BackendUnavailable(OP, requested, blocking, self._alternative(spec, exclude=requested))
            named = [TraceEntry(requested, "chosen", "named explicitly (strict: no fallback)")]
            return _Plan(requested, source, spec, [b], named)
        candidates: list[GdnBackend] = []
        trace: list[TraceEntry] = []
        for name in self.order:
            b = self.backends[name]
            # Input constraints first: they are free, and a CPU call then never probes the GPU environment.
            blocking = self._blocking(b, spec, with_environment=False) or self._blocking(
                b, spec, with_environment=True
            )
            if blocking:
                trace.append(TraceEntry(name, "skipped", _summary(blocking), tuple(blocking)))
                continue
            warnings = self._warnings(b)
            outcome = "chosen" if not candidates else "fallback"
            reason = "first usable backend in order" if not candidates else "usable, used if the above fails"
            trace.append(TraceEntry(name, outcome, reason, warnings))
            candidates.append(b)
        return _Plan("auto", source, spec, candidates, trace)

    def _blocking(self, b: GdnBackend, spec: CallSpec, *, with_environment: bool) -> list[Finding]:
        found = list(b.input_findings(spec))
        if with_environment and b.MODULE is not None:
            found = list(self.environment.status(b).findings) + list(self._failed.get(b.NAME, ())) + found
        return [f for f in found if f.severity == "error"]

    def _warnings(self, b: GdnBackend) -> tuple[Finding, ...]:
        if b.MODULE is None:
            return ()
        return tuple(f for f in self.environment.status(b).findings if f.severity != "error")

    def _alternative(self, spec: CallSpec, *, exclude: str) -> str | None:
        for name in self.order:
            if name != exclude and not self._blocking(self.backends[name], spec, with_environment=True):
                return name
        return None

    def decisions(self) -> list[Decision]:
        with self._lock:
            return [p.decision() for p in self._plans.values()]

    # ---- first use ----------------------------------------------------------------------------------------
    def _first_use(self, backend: str, key: tuple[Any, ...], args: tuple[Any, ...]) -> Any:
        with self._lock:
            plan = self._plans.get((backend, key))
            if plan is None:
                plan = self.plan(backend, _spec_from_key(key))
                self._plans[(backend, key)] = plan
            if plan.run is not None:
                return plan.run(*args)
            while plan.candidates:
                b = plan.candidates[0]
                stage = "load"
                try:
                    if b.NAME not in self._loaded:
                        b.load()
                        self._loaded.add(b.NAME)
                    stage = "launch"
                    result = b.run(*args)
                except Exception as exc:
                    if b.MODULE is None or isinstance(exc, UsageError) or _is_out_of_memory(exc):
                        raise  # our own backend or the caller's problem: not a reason to switch backends
                    findings = self._record(b, stage, exc, plan)
                    if plan.requested != "auto":
                        del self._plans[(backend, key)]  # the next call re-plans and names this backend again
                        alternative = self._alternative(plan.spec, exclude=b.NAME)
                        raise BackendUnavailable(OP, b.NAME, findings, alternative) from exc
                    continue
                plan.proven = True
                plan.run = b.run
                self._announce(plan)
                return result
            raise BackendUnavailable(OP, "auto", [f for e in plan.trace for f in e.findings])

    def _record(self, b: GdnBackend, stage: str, exc: BaseException, plan: _Plan) -> tuple[Finding, ...]:
        rest = [c.NAME for c in plan.candidates[1:]]
        alternative = rest[0] if rest else self._alternative(plan.spec, exclude=b.NAME) or "torch"
        findings = classify_failure(b, stage, exc, alternative=alternative, facts=self.environment.facts())
        log_path = getattr(exc, "log_path", None)
        self._failed[b.NAME] = findings
        self.environment.record_failure(b, findings, log_path)
        primary = primary_finding(findings)
        if (b.NAME, primary.code) not in self._logged:
            self._logged.add((b.NAME, primary.code))
            fix = f" Fix: {primary.fixes[0].render()}" if primary.fixes else ""
            then = f" Falling back to {rest[0]}." if rest and plan.requested == "auto" else ""
            log.warning(
                "jitguard: %s failed on first use [%s]: %s%s%s",
                b.TITLE,
                primary.code,
                primary.cause,
                fix,
                then,
            )
        # Every plan that counted on this backend must be re-made; this one continues with its next candidate.
        for other_key, other in list(self._plans.items()):
            if other is not plan and b in other.candidates:
                del self._plans[other_key]
        plan.candidates.pop(0)
        for i, entry in enumerate(plan.trace):
            if entry.backend == b.NAME:
                plan.trace[i] = TraceEntry(b.NAME, "failed", f"failed to {stage} on first use", findings)
            elif plan.candidates and entry.backend == plan.candidates[0].NAME:
                plan.trace[i] = TraceEntry(
                    entry.backend, "chosen", f"{b.NAME} failed on first use", entry.findings
                )
        return findings

    def _announce(self, plan: _Plan) -> None:
        """One warning per process when an accelerator call runs on a fallback."""
        chosen = plan.candidates[0]
        if plan.requested != "auto" or plan.spec.device_type == "cpu" or self.order[0] == chosen.NAME:
            return
        key = ("fallback", f"{chosen.NAME}/{plan.spec.device_type}")
        if key in self._logged:
            return
        self._logged.add(key)
        skipped = [e for e in plan.trace if e.outcome in ("skipped", "failed")]
        if not skipped:
            return
        first = primary_finding(skipped[0].findings) if skipped[0].findings else None
        detail = f"{skipped[0].backend} [{first.code}] {first.title}" if first else skipped[0].backend
        fix = f" Fix: {first.fixes[0].render()}" if first and first.fixes else ""
        notice = make(
            "gdn-fallback-in-use",
            backend=chosen.NAME,
            evidence=[f"{e.backend}: {e.reason}" for e in skipped],
            device=plan.spec.device_type,
            title=chosen.TITLE,
            skipped=detail,
        )
        plan.trace.append(TraceEntry(chosen.NAME, "note", notice.title, (notice,)))
        log.warning("jitguard: [%s] %s. %s%s", notice.code, notice.title, notice.cause, fix)

    def reset(self) -> None:
        with self._lock:
            self._plans.clear()
            self._failed.clear()
            self._logged.clear()
            self._setting = None
            self.environment.clear()


def _failure_cache(cache_dir: Path) -> Any:
    from jitguard.state.failure_cache import FailureCache, ttl_from_env

    return FailureCache(cache_dir, ttl=ttl_from_env())


def _summary(findings: Sequence[Finding]) -> str:
    # An input finding's cause is the reason itself ("the inputs are on cpu; ..."); others' titles tell.
    return "; ".join(
        f"[{f.code}] {f.cause if f.code == 'gdn-input-unsupported' else f.title}" for f in findings[:3]
    ) + (" ..." if len(findings) > 3 else "")


def _is_out_of_memory(exc: BaseException) -> bool:
    return type(exc).__name__ == "OutOfMemoryError" or "CUDA out of memory" in str(exc)


def _spec_from_key(key: tuple[Any, ...]) -> CallSpec:
    device_type, dtype, head_dim, hq, hk, hv = key
    return CallSpec(
        str(device_type), str(dtype).replace("torch.", ""), int(head_dim), int(hq), int(hk), int(hv)
    )


def primary_finding(findings: Sequence[Finding]) -> Finding:
    """The finding a one-line log should name: the first classified cause, else the first finding."""
    for f in findings:
        if f.code not in _GENERIC and f.severity == "error":
            return f
    return findings[0]


def classify_failure(
    b: GdnBackend, stage: str, exc: BaseException, *, alternative: str, facts: Facts | None = None
) -> tuple[Finding, ...]:
    """A first-use exception -> findings: the stage finding plus whatever the log classifier recognises; with
    ``facts``, those findings name this machine's fixes (the directory holding libcuda, ...) like pre-flight's."""
    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    last = (traceback.format_exception_only(type(exc), exc)[-1]).strip()
    # BuildFailed from jitguard's supervised build (flashinfer_hook) arrives already classified.
    already = getattr(exc, "findings", None) if isinstance(exc, JitguardError) else None
    if already:
        classified = list(already)
    else:

        def run_classifier() -> list[Finding]:
            from jitguard.findings.classify import classify

            return list(classify(text, getattr(exc, "returncode", None), backend=b.NAME, facts=facts))

        classified = [
            f for f in _guarded(b.NAME, b.TITLE, run_classifier) if f.code != "gdn-preflight-crashed"
        ]
    code = "gdn-first-use-failed" if stage == "load" else "gdn-launch-failed"
    head = make(
        code,
        backend=b.NAME,
        evidence=[line for line in text.strip().splitlines()[-6:]],
        title=b.TITLE,
        stage="build or load" if b.NAME == "flashinfer" else "load",
        error=last[:500],
        alternative=alternative,
    )
    return (head, *classified)


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
        from jitguard.gdn.validate import check_backend_name

        check_backend_name(name)
    b = d.backends[name]
    env = d.environment if facts is None else Environment(facts=facts, cache_dir=d.environment.cache_dir)
    status = env.status(b) if b.MODULE is not None else BackendStatus(name, True, ())
    failed = d._failed.get(name, ())
    if failed:
        return BackendStatus(name, False, tuple(sort_findings(list(status.findings) + list(failed))))
    return status


def resolve(requested: str = "auto", spec: CallSpec | None = None, *, facts: Facts | None = None) -> Decision:
    """Plan (without running anything) which backend a call of ``spec`` (default: a Qwen3.5 layer on CUDA,
    bf16) would use. A named backend that cannot run raises ``BackendUnavailable``."""
    from jitguard.gdn.validate import check_backend_name

    requested = check_backend_name(requested)
    d = dispatcher()
    if facts is not None:
        d = Dispatcher(list(d.backends.values()), Environment(facts=facts, cache_dir=d.environment.cache_dir))
    return d.plan(requested, spec or QWEN35_SPEC).decision()


def explain(spec: CallSpec | None = None) -> str:
    """The decision trace: every kind of call this process made, then what ``auto`` picks for ``spec``
    (default: a Qwen3.5 layer on CUDA, bf16) with each backend's status here."""
    d = dispatcher()
    parts = ["jitguard GDN prefill: backend decisions"]
    made = d.decisions()
    if made:
        parts.append(f"\nCalls made in this process ({len(made)} kind(s)):")
        parts += [decision.render() for decision in made]
    target = spec or QWEN35_SPEC
    parts.append("\nFor a call like this one, `auto` would choose:")
    try:
        parts.append(d.plan("auto", target).decision().render())
    except JitguardError as exc:
        parts.append(str(exc))
    return "\n".join(parts)


def describe_auto(*, facts: Facts | None = None, spec: CallSpec | None = None) -> dict[str, Any]:
    """``resolve('auto', spec)`` as JSON, for `jitguard doctor` (default spec: a Qwen3.5 layer on CUDA)."""
    return resolve("auto", spec, facts=facts).to_json()
