"""The Finding: one diagnosed fact about whether a backend can work here (pip-style diagnostic error)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

Severity = Literal["error", "warning", "info"]
SEVERITY_ORDER: dict[str, int] = {"error": 0, "warning": 1, "info": 2}


@dataclass(frozen=True)
class Fix:
    """One way out: a sentence, and where one exists a copy-pasteable command."""

    text: str
    command: str | None = None

    def render(self) -> str:
        return f"{self.text} `{self.command}`" if self.command else self.text

    def to_json(self) -> dict[str, Any]:
        return {"text": self.text, "command": self.command}


@dataclass(frozen=True)
class Finding:
    """A diagnosed fact. ``error`` blocks the backend; ``warning`` and ``info`` do not.

    ``code`` is stable (kebab-case) and documented in docs/findings.md; never reuse a code for another meaning.
    """

    code: str
    severity: Severity
    title: str
    cause: str
    evidence: tuple[str, ...] = ()
    fixes: tuple[Fix, ...] = ()
    backend: str = "any"

    @property
    def blocking(self) -> bool:
        return self.severity == "error"

    def render_lines(self, *, fixes: int = 2, indent: str = "  ", severity: bool = False) -> list[str]:
        """The finding for a person: ``[code] title: cause`` and up to ``fixes`` fixes, one per line. The one
        text form every report, error message and log line uses."""
        level = f" ({self.severity})" if severity else ""
        lines = [f"{indent}[{self.code}]{level} {self.title}: {self.cause}"]
        lines += [f"{indent}  Fix: {fix.render()}" for fix in self.fixes[:fixes]]
        return lines

    def fix_suffix(self) -> str:
        """`` Fix: <the first fix>`` for a one-line log message, or "" when there is none."""
        return f" Fix: {self.fixes[0].render()}" if self.fixes else ""

    def to_json(self) -> dict[str, Any]:
        return {
            "code": self.code,
            "severity": self.severity,
            "title": self.title,
            "cause": self.cause,
            "evidence": list(self.evidence),
            "fixes": [f.to_json() for f in self.fixes],
            "backend": self.backend,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Finding:
        return cls(
            code=str(data["code"]),
            severity=data["severity"],
            title=str(data["title"]),
            cause=str(data["cause"]),
            evidence=tuple(str(e) for e in data.get("evidence", ())),
            fixes=tuple(Fix(str(f["text"]), f.get("command")) for f in data.get("fixes", ())),
            backend=str(data.get("backend", "any")),
        )


def sort_findings(findings: list[Finding] | tuple[Finding, ...]) -> list[Finding]:
    """Most severe first, then by code, so reports and JSON are stable."""
    return sorted(findings, key=lambda f: (SEVERITY_ORDER[f.severity], f.code))


@dataclass(frozen=True)
class FixTemplate:
    text: str
    command: str | None = None


@dataclass(frozen=True)
class CatalogEntry:
    """The fixed part of a finding. ``cause`` and fix templates use ``str.format`` fields filled by ``make``."""

    code: str
    severity: Severity
    title: str
    cause: str
    fixes: tuple[FixTemplate, ...] = field(default_factory=tuple)
    area: str = "general"
