"""Which backend runs a GDN prefill call, and the trace of why (docs/design.md "Backend policy").

``auto`` tries the backends in order, skipping one whose input constraints the call violates, that has an
``error`` finding from pre-flight, a cached failure for this environment, or a failure on first use in this
process. A named backend is strict: the decision raises ``BackendUnavailable`` carrying the findings.

Unknowns (docs/failsafe.md): a fact jitguard could not collect is a ``fact-unavailable`` warning, never an
error, so it blocks nothing. ``auto`` keeps such a backend in its place (a first-use failure still falls
through, classified) and the status says ``verified=False``: nobody may report it as "passed". Strict mode
tries the named backend as asked.

Everything here is pure: findings in, a decision out.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from jitguard.errors import BackendUnavailable
from jitguard.findings.model import Finding, sort_findings

OP = "GDN prefill"
ORDER = ("flashinfer", "triton", "torch")
UNVERIFIED = "fact-unavailable"  # the code of a fact jitguard could not collect
# Codes that say "it failed" without saying why; a one-line log prefers a classified cause over them.
GENERIC_FAILURES = frozenset({"gdn-first-use-failed", "gdn-launch-failed", "build-failed"})


def head_layout(num_q_heads: int, num_k_heads: int, num_v_heads: int) -> str | None:
    """'mha', 'gva' or 'gqa'; None when the head counts fit none of them (docs/gdn.md "Heads")."""
    if min(num_q_heads, num_k_heads, num_v_heads) <= 0:
        return None
    if num_q_heads == num_k_heads == num_v_heads:
        return "mha"
    if num_q_heads == num_k_heads and num_v_heads % num_q_heads == 0:
        return "gva"
    if num_k_heads == num_v_heads and num_q_heads % num_k_heads == 0:
        return "gqa"
    return None


@dataclass(frozen=True)
class CallSpec:
    """What a decision needs to know about one call: no tensors, only their type-level facts."""

    device_type: str = "cuda"
    dtype: str = "bfloat16"
    head_dim: int = 128
    num_q_heads: int = 16
    num_k_heads: int = 16
    num_v_heads: int = 32

    @property
    def num_heads(self) -> int:
        """State/output heads: max(Hq, Hv)."""
        return max(self.num_q_heads, self.num_v_heads)

    @property
    def layout(self) -> str | None:
        return head_layout(self.num_q_heads, self.num_k_heads, self.num_v_heads)

    def describe(self) -> str:
        return (
            f"{self.device_type} {self.dtype}, D={self.head_dim}, heads q/k/v="
            f"{self.num_q_heads}/{self.num_k_heads}/{self.num_v_heads} ({self.layout})"
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "device_type": self.device_type,
            "dtype": self.dtype,
            "head_dim": self.head_dim,
            "num_q_heads": self.num_q_heads,
            "num_k_heads": self.num_k_heads,
            "num_v_heads": self.num_v_heads,
            "layout": self.layout,
        }


# The Qwen3.5 / Qwen3-Next linear-attention layer at TP1: what `explain()` resolves when no call was made.
QWEN35_SPEC = CallSpec()


@dataclass(frozen=True)
class BackendStatus:
    """Can this backend run in this environment (any input)? ``findings`` say why not, or carry warnings.

    ``verified`` is False when a fact the checks need could not be collected: the backend is not known to
    be blocked, but nothing proves it works either (never report such a status as "passed")."""

    name: str
    usable: bool
    findings: tuple[Finding, ...] = ()

    @property
    def verified(self) -> bool:
        return not any(f.code == UNVERIFIED for f in self.findings)

    @classmethod
    def of(cls, name: str, findings: Sequence[Finding]) -> BackendStatus:
        ordered = tuple(sort_findings(list(findings)))
        return cls(name, not any(f.blocking for f in ordered), ordered)

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "usable": self.usable,
            "verified": self.verified,
            "findings": [f.to_json() for f in self.findings],
        }


@dataclass(frozen=True)
class TraceEntry:
    """One backend's fate in a decision: 'chosen', 'skipped', 'failed' (on first use), 'fallback' (usable,
    not needed) or 'note'."""

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
    """The backends to try for one kind of call, in order (the first is chosen), and the trace of why."""

    candidates: tuple[str, ...]
    trace: tuple[TraceEntry, ...]
    requested: str = "auto"
    source: str = "default"  # 'argument', 'JITGUARD_GDN_BACKEND' or 'default'
    spec: CallSpec = QWEN35_SPEC
    proven: bool = False  # True once the backend ran successfully in this process

    @property
    def backend(self) -> str:
        return self.candidates[0] if self.candidates else "none"

    def to_json(self) -> dict[str, Any]:
        return {
            "backend": self.backend,
            "requested": self.requested,
            "source": self.source,
            "proven": self.proven,
            "spec": self.spec.to_json(),
            "trace": [e.to_json() for e in self.trace],
        }


@dataclass(frozen=True)
class Assessment:
    """What the caller found out about one backend for one kind of call: its blocking findings (input
    constraints, pre-flight, cached and first-use failures) and its warnings."""

    name: str
    blocking: tuple[Finding, ...] = ()
    warnings: tuple[Finding, ...] = ()


def decide(
    assessments: Sequence[Assessment],
    spec: CallSpec,
    *,
    requested: str = "auto",
    source: str = "default",
    raise_when_blocked: bool = True,
) -> Decision:
    """Order the candidates. ``assessments`` come in ``auto`` order; for a named backend the decision is
    strict and raises ``BackendUnavailable`` when it is blocked (with ``raise_when_blocked=False``, it
    returns the decision that no backend runs, for a report that must go on: doctor, explain)."""
    if requested != "auto":
        named = next(a for a in assessments if a.name == requested)
        if named.blocking and raise_when_blocked:
            raise BackendUnavailable(
                OP, requested, named.blocking, alternative(assessments, exclude=requested)
            )
        if named.blocking:
            blocked = (
                TraceEntry(requested, "skipped", summary(named.blocking), named.blocking),
                TraceEntry(
                    "none", "note", f"{requested} was named (strict: no fallback) and cannot run here"
                ),
            )
            return Decision((), blocked, requested, source, spec)
        trace = (TraceEntry(requested, "chosen", "named explicitly (strict: no fallback)", named.warnings),)
        return Decision((requested,), trace, requested, source, spec)
    candidates: list[str] = []
    entries: list[TraceEntry] = []
    for a in assessments:
        if a.blocking:
            entries.append(TraceEntry(a.name, "skipped", summary(a.blocking), a.blocking))
            continue
        first = not candidates
        outcome = "chosen" if first else "fallback"
        reason = "first usable backend in order" if first else "usable, used if the above fails"
        if first and any(f.code == UNVERIFIED for f in a.warnings):
            reason = "first backend in order; not verified here (a fact could not be collected)"
        entries.append(TraceEntry(a.name, outcome, reason, a.warnings))
        candidates.append(a.name)
    if not candidates:
        entries.append(TraceEntry("none", "note", "no backend can run a call like this here"))
    return Decision(tuple(candidates), tuple(entries), "auto", source, spec)


def after_failure(decision: Decision, failed: str, stage: str, findings: Sequence[Finding]) -> Decision:
    """The decision once ``failed`` (its first candidate) failed on first use: the next candidate is chosen."""
    rest = tuple(c for c in decision.candidates if c != failed)
    entries: list[TraceEntry] = []
    for entry in decision.trace:
        if entry.backend == failed:
            entry = TraceEntry(failed, "failed", f"failed to {stage} on first use", tuple(findings))
        elif rest and entry.backend == rest[0]:
            entry = TraceEntry(entry.backend, "chosen", f"{failed} failed on first use", entry.findings)
        entries.append(entry)
    return Decision(rest, tuple(entries), decision.requested, decision.source, decision.spec)


def alternative(assessments: Sequence[Assessment], *, exclude: str) -> str | None:
    """The first backend other than ``exclude`` with nothing blocking it."""
    return next((a.name for a in assessments if a.name != exclude and not a.blocking), None)


def primary_finding(findings: Sequence[Finding]) -> Finding:
    """The finding a one-line log should name: the first classified cause, else the first finding."""
    for f in findings:
        if f.code not in GENERIC_FAILURES and f.severity == "error":
            return f
    return findings[0]


def summary(findings: Sequence[Finding]) -> str:
    """One line for a trace: an input finding's cause is the reason itself, others' titles tell."""
    text = "; ".join(
        f"[{f.code}] {f.cause if f.code == 'gdn-input-unsupported' else f.title}" for f in findings[:3]
    )
    return text + (" ..." if len(findings) > 3 else "")
