"""Text for people: decisions and their traces. Pure (values in, strings out); the CLI prints them, the op's
``explain()`` returns them."""

from __future__ import annotations

from collections.abc import Sequence

from jitguard.decision.gdn_resolution import Decision
from jitguard.findings.model import sort_findings


def render_decision(decision: Decision) -> str:
    """A GDN prefill decision: what was asked, what was chosen, and each backend's fate with its findings."""
    how = "strict" if decision.requested != "auto" else "auto: flashinfer -> triton -> torch"
    if not decision.candidates:
        chosen = "none (no backend can run a call like this here)"
    else:
        chosen = decision.backend + ("" if decision.proven else " (not run yet in this process)")
    lines = [
        f"GDN prefill for {decision.spec.describe()}",
        f"  requested: {decision.requested} (from {decision.source}; {how})",
        f"  chosen:    {chosen}",
    ]
    for entry in decision.trace:
        if entry.backend == "none":
            continue
        lines.append(f"  - {entry.backend:<10} {entry.outcome:<8} {entry.reason}")
        for f in sort_findings(list(entry.findings)):
            lines += f.render_lines(indent="      ", severity=True)
    return "\n".join(lines)


def render_explain(made: Sequence[Decision], auto: Decision | str) -> str:
    """The decision trace: every kind of call a process made, then what ``auto`` picks for a typical call
    (or why it cannot say: ``auto`` may be the text of an error)."""
    parts = ["jitguard GDN prefill: backend decisions"]
    if made:
        parts.append(f"\nCalls made in this process ({len(made)} kind(s)):")
        parts += [render_decision(d) for d in made]
    parts.append("\nFor a call like this one, `auto` would choose:")
    parts.append(auto if isinstance(auto, str) else render_decision(auto))
    return "\n".join(parts)
