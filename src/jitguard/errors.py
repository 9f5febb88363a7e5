"""The small error hierarchy. Each error builds its own explanatory message and carries an exit code."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from jitguard.findings.model import Finding

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2


class JitguardError(Exception):
    """Base class. ``exit_code`` follows docs/design.md "Exit codes": 1 blocking finding / failed build, 2 usage error.

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


class SettingsInvalid(UsageError):
    """One or more malformed JITGUARD_* variables, all at once (`jitguard doctor`), each a ``config-invalid``
    finding with its fix."""

    kind = "config"

    def __init__(self, errors: Sequence[ConfigError], findings: Sequence[Finding]) -> None:
        self.errors = tuple(errors)
        self.findings = tuple(findings)
        lines = [f"{len(self.errors)} JITGUARD_* variable(s) with a value jitguard does not accept:"]
        lines += [f"  {e}" for e in self.errors]
        super().__init__("\n".join(lines))


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
    """A supervised build did not give a usable module. Carries the classified findings and the path of the
    full log. ``outcome`` says what happened, in one word or a few, and nothing else does: ``failed`` (it ran
    and failed), ``not started`` (pre-flight or a missing tool stopped it first), ``not retried`` (the
    failure cache); ``headline`` is the first line: "Build of X <outcome>: <detail>"."""

    kind = "build-failed"

    def __init__(
        self,
        module: str,
        findings: Sequence[Finding],
        log_path: str | None,
        detail: str = "",
        *,
        outcome: str = "failed",
    ):
        self.module = module
        self.findings = tuple(findings)
        self.log_path = log_path
        self.outcome = outcome
        self.headline = f"Build of {module} {outcome}" + (f": {detail}" if detail else "")
        lines = [self.headline + "."]
        for f in self.findings:
            lines += f.render_lines()
        if log_path:
            lines.append(f"  Full log: {log_path}")
        super().__init__("\n".join(lines))


class CachedBuildFailure(BuildFailed):
    """The module already failed in this same environment (jitguard's failure cache); it was not retried.
    ``ago`` says when, e.g. "3 min ago"."""

    def __init__(self, module: str, findings: Sequence[Finding], log_path: str | None, *, ago: str) -> None:
        super().__init__(
            module,
            findings,
            log_path,
            detail=(
                f"it failed {ago} in this same environment (jitguard's failure cache). Fixing the cause "
                "changes the environment fingerprint and the next attempt builds; to retry anyway: "
                f"jitguard cache clear --module {module} --yes"
            ),
            outcome="not retried",
        )


class LockTimeout(BuildFailed):
    """Waited JITGUARD_LOCK_TIMEOUT for another process's build of the module; carries ``lock-timeout``.
    ``who`` describes the holder; ``waited`` is in seconds, ``waited_text`` the same for people."""

    def __init__(
        self,
        module: str,
        finding: Finding,
        *,
        waited: float,
        waited_text: str,
        who: str,
        log_path: str | None,
    ) -> None:
        self.waited = waited
        super().__init__(
            module,
            [finding],
            log_path,
            detail=f"waited {waited_text} for the build lock held by {who}, then gave up",
            outcome="not started",
        )


class LockUnavailable(JitguardError):
    """The lock file cannot be created or opened at all (not contention): say whose it is and what to do."""

    def __init__(self, module: str, lock_path: Path, exc: OSError) -> None:
        self.module = module
        self.lock_path = lock_path
        owner = _owner_of(lock_path)
        super().__init__(
            f"Cannot open the build lock of {module} at {lock_path}: {exc.strerror or exc}{owner}. "
            "Fix: run as the user who owns FlashInfer's cache, make that directory writable for you "
            f"(`chmod -R u+w {lock_path.parent}`), or point FLASHINFER_WORKSPACE_BASE (FlashInfer's cache) and "
            "JITGUARD_CACHE_DIR at directories you own."
        )


class DirectoryInTheWay(JitguardError):
    """A directory jitguard must read or fill is a file, or sits under one (``cache list`` with
    JITGUARD_CACHE_DIR naming a file, ``warm restore`` into such a cache): the finding says what to move."""

    def __init__(self, what: str, path: str, findings: Sequence[Finding]) -> None:
        self.path = path
        self.findings = tuple(findings)
        lines = [f"Cannot use {what} {path}: a file is in the way."]
        for f in self.findings:
            lines += f.render_lines()
        super().__init__("\n".join(lines))


class StateUnwritable(JitguardError):
    """jitguard could not change its own state as asked (``cache clear`` on a read-only cache dir): where,
    why, and what to do. ``failures`` holds (path, reason) for every file that stayed."""

    def __init__(self, action: str, root: Path, failures: Sequence[tuple[str, str]]) -> None:
        self.root = root
        self.failures = tuple(failures)
        path, reason = self.failures[0]
        more = f" (and {len(self.failures) - 1} more)" if len(self.failures) > 1 else ""
        super().__init__(
            f"Cannot {action} in {root}: {path}: {reason}{more}. Fix: make the directory writable for this user "
            f"(`chmod -R u+w {root}`; a read-only file system must be remounted read-write), or point "
            "JITGUARD_CACHE_DIR at a directory of your own."
        )


def _owner_of(path: Path) -> str:
    """' (<dir> is owned by uid N)' for the path or its nearest existing parent, when that is not us."""
    # lazy: every command and plugin loads errors first; fileio only when a state dir is refused
    from jitguard.fileio import foreign_owner  # fileio is ground floor too; errors is imported by it nowhere

    found = foreign_owner(path)
    return f" ({found[0]} is owned by uid {found[1]})" if found else ""
