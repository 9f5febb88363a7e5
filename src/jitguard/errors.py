"""The small error hierarchy. Each error builds its own explanatory message and carries an exit code."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from jitguard.findings.model import Finding

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2


class JitguardError(Exception):
    """Base class. ``exit_code`` follows DESIGN.md: 1 blocking finding / failed build, 2 usage error.

    ``kind`` names the class of error in the ``jitguard.error/1`` JSON envelope; ``findings`` and ``log_path``
    are what a subclass can say beyond its message."""

    exit_code = EXIT_FAILURE
    kind = "error"
    findings: tuple[Finding, ...] = ()
    log_path: str | None = None


class UsageError(JitguardError):
    """Bad input from the user: a flag, an argument or an environment variable."""

    exit_code = EXIT_USAGE
    kind = "usage"


class ConfigError(UsageError):
    """A malformed environment variable or setting; names the variable, the value and what is accepted."""

    kind = "config"

    def __init__(self, name: str, value: str, expected: str) -> None:
        self.name = name
        self.value = value
        self.expected = expected
        shown = repr(value) if len(value) <= 60 else f"{value[:40]!r}... ({len(value)} characters)"
        if name.startswith("-"):  # a command-line flag
            message = f"{name} {shown} is not valid: expected {expected}."
        else:
            message = f"{name}={shown} is not valid: expected {expected}. Fix the value or unset {name}."
        super().__init__(message)


class BackendUnavailable(JitguardError):
    """A backend the user named explicitly cannot run here. Carries the findings that say why."""

    kind = "backend-unavailable"

    def __init__(self, op: str, backend: str, findings: Sequence[Finding], alternative: str | None = None):
        self.op = op
        self.backend = backend
        self.findings = tuple(findings)
        self.alternative = alternative
        super().__init__(self._message())

    def _message(self) -> str:
        blocking = [f for f in self.findings if f.severity == "error"] or list(self.findings)
        lines = [f"{self.backend} {self.op} cannot run here."]
        for f in blocking:
            lines += f.render_lines()
        if self.alternative:
            lines.append(f"  Or use backend={self.alternative!r}.")
        return "\n".join(lines)


class BuildFailed(JitguardError):
    """A supervised build failed. Carries the classified findings and the path of the full log."""

    kind = "build-failed"

    def __init__(self, module: str, findings: Sequence[Finding], log_path: str | None, detail: str = ""):
        self.module = module
        self.findings = tuple(findings)
        self.log_path = log_path
        head = f"Build of {module} failed"
        if detail:
            head += f": {detail}"
        lines = [head + "."]
        for f in self.findings:
            lines += f.render_lines()
        if log_path:
            lines.append(f"  Full log: {log_path}")
        super().__init__("\n".join(lines))
