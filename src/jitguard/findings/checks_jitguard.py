"""Findings about jitguard itself: its installation, facts it could not collect, and its own faults at the
boundary with an engine (docs/failsafe.md). A check unit that reads an unavailable fact yields one
``fact-unavailable`` finding for it instead of crashing or guessing."""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from jitguard.facts import FactUnavailable
from jitguard.facts.installation import package_for_module
from jitguard.findings.catalog import make
from jitguard.findings.model import Finding

if TYPE_CHECKING:
    from jitguard.facts.installation import InstallationFacts

_JITGUARD_ROOT = Path(__file__).resolve().parents[1]
_NO_MODULE = re.compile(r"No module named '([\w.]+)'")
# Packages some commands need that are the engine's, not jitguard's own dependencies.
OPTIONAL_PACKAGES = {
    "torch": "torch",
    "flashinfer": "flashinfer-python",
    "fla": "fla-core",
    "triton": "triton",
}


def repair(error: str) -> dict[str, Any]:
    """The first fix for an error text: install the missing dependency it names, else check jitguard's own
    installation."""
    found = _NO_MODULE.search(error)
    requirement = package_for_module(found.group(1)) if found else None
    if requirement:
        return {
            "repair": f"Install jitguard's missing dependency {requirement.split('>')[0]}:",
            "repair_command": f"pip install '{requirement}'",
        }
    if found and found.group(1).split(".")[0] in OPTIONAL_PACKAGES:
        package = OPTIONAL_PACKAGES[found.group(1).split(".")[0]]
        return {"repair": f"This needs {package}; install it:", "repair_command": f"pip install {package}"}
    return {"repair": "Check jitguard's own installation:", "repair_command": "jitguard doctor"}


def unavailable(fact: str, error: str, backend: str = "any") -> Finding:
    return make(
        "fact-unavailable",
        backend=backend,
        evidence=[f"{fact}: {error}"],
        fact=fact,
        error=error,
        **repair(error),
    )


def unit(backend: str, check: Callable[[], list[Finding]]) -> list[Finding]:
    """Run one check unit; a fact it needs that could not be collected becomes a finding of its own."""
    try:
        return check()
    except FactUnavailable as exc:
        return [unavailable(exc.fact, exc.error, backend)]


def raised_by(exc: BaseException) -> tuple[str, str] | None:
    """Where ``exc`` was raised when that is another package's code, not jitguard's: (the top-level package,
    "file:line in function"). jitguard's hooks call into FlashInfer and the engines; an error raised there
    (FlashInfer's include path missing from an image) meets the engine without jitguard too."""
    import traceback

    frames = traceback.extract_tb(exc.__traceback__) if exc.__traceback__ else []
    if not frames:
        return None
    last = Path(frames[-1].filename)
    if _JITGUARD_ROOT in last.parents:
        return None
    roots = [Path(p) for p in sys.path if p and Path(p) in last.parents]
    if not roots:
        return None
    inside = last.relative_to(max(roots, key=lambda r: len(r.parts)))  # site-packages, not the lib above it
    package = inside.parts[0].removesuffix(".py")
    if package in sys.stdlib_module_names:
        return None
    return package, f"{inside}:{frames[-1].lineno} in {frames[-1].name}"


def fault(where: str, then: str, exc: BaseException) -> Finding:
    """jitguard itself failed inside ``where`` (e.g. "the FlashInfer build hook"); ``then`` says what happens
    now (e.g. "FlashInfer builds as it would without jitguard")."""
    import traceback

    error = f"{type(exc).__name__}: {exc}"
    origin = raised_by(exc)
    fix = repair(error)
    if origin and fix["repair_command"] == "jitguard doctor":
        package, place = origin
        fix["repair"] = (
            f"The error was raised by {package}'s own code ({place}), which the engine runs without jitguard "
            f"too: fix what it names in {package} or its environment; jitguard's view of this host:"
        )
    return make(
        "jitguard-fault",
        evidence=traceback.format_exception(type(exc), exc, exc.__traceback__)[-4:],
        where=where,
        then=then,
        error=error,
        **fix,
    )


def installation(facts: InstallationFacts) -> list[Finding]:
    """jitguard's own installation, checked first by `jitguard doctor`."""
    found = [
        make(
            "jitguard-dependency-missing",
            evidence=[f"import {d.module}: {d.error}"],
            package=d.package,
            module=d.module,
            requirement=d.requirement,
            error=d.error,
        )
        for d in facts.broken
    ]
    found += [
        make(
            "jitguard-entry-point-missing",
            evidence=[f"{group}: {name}"],
            group=group,
            name=name,
            effect=effect,
        )
        for group, name, effect in facts.missing_entry_points
    ]
    if facts.installed_version is not None and facts.installed_version != facts.imported_version:
        found.append(
            make(
                "jitguard-version-mismatch",
                evidence=[
                    f"jitguard.__version__ = {facts.imported_version} ({facts.location})",
                    f"installed distribution: {facts.installed_version}",
                ],
                imported=facts.imported_version,
                location=facts.location,
                installed=facts.installed_version,
            )
        )
    return found
