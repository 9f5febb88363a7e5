"""jitguard's own installation: can each runtime dependency be imported, are the entry points there, is the
code that runs the installed version? Read from importlib.metadata and real imports of the (small)
dependencies; never raises."""

from __future__ import annotations

import importlib
import importlib.metadata
import re
from dataclasses import dataclass
from pathlib import Path

from jitguard.version import __version__

DISTRIBUTION = "jitguard"
# Runtime requirement -> the module it provides (when the metadata cannot be read: a source tree on sys.path).
IMPORT_NAMES = {"psutil": "psutil", "pyelftools": "elftools", "packaging": "packaging", "rich": "rich"}
FALLBACK_REQUIREMENTS = ("psutil>=5.9", "pyelftools>=0.30", "packaging>=23", "rich>=13")
ENTRY_POINTS = (
    ("console_scripts", "jitguard", "`jitguard` is not on PATH"),
    ("vllm.general_plugins", "jitguard", "vLLM does not load jitguard's plugin"),
)


@dataclass(frozen=True)
class Dependency:
    requirement: str  # e.g. "pyelftools>=0.30"
    package: str  # "pyelftools"
    module: str  # "elftools"
    error: str | None  # None: imports fine


@dataclass(frozen=True)
class InstallationFacts:
    imported_version: str
    location: str
    installed_version: str | None  # None: no installed distribution (sources on sys.path)
    dependencies: tuple[Dependency, ...]
    missing_entry_points: tuple[tuple[str, str, str], ...]  # (group, name, effect)

    @property
    def broken(self) -> tuple[Dependency, ...]:
        return tuple(d for d in self.dependencies if d.error is not None)


def probe() -> InstallationFacts:
    installed = _installed_version()
    requirements = _requirements() if installed else list(FALLBACK_REQUIREMENTS)
    deps = tuple(_dependency(r) for r in requirements)
    missing = tuple(e for e in ENTRY_POINTS if installed and not _has_entry_point(e[0], e[1]))
    return InstallationFacts(
        imported_version=__version__,
        location=str(Path(__file__).parent.parent),  # the package this module was imported from
        installed_version=installed,
        dependencies=deps,
        missing_entry_points=missing,
    )


def module_for(package: str) -> str:
    return IMPORT_NAMES.get(package.lower(), package.replace("-", "_"))


def package_for_module(module: str) -> str | None:
    """The runtime requirement (e.g. ``pyelftools>=0.30``) that provides top-level ``module``, if any."""
    top = module.split(".")[0]
    for requirement in FALLBACK_REQUIREMENTS:
        if module_for(_name(requirement)) == top:
            return requirement
    return None


def _installed_version() -> str | None:
    try:
        return importlib.metadata.version(DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        return None


def _requirements() -> list[str]:
    try:
        declared = importlib.metadata.requires(DISTRIBUTION) or []
    except importlib.metadata.PackageNotFoundError:
        return list(FALLBACK_REQUIREMENTS)
    return [
        r.split(";")[0].strip() for r in declared if "extra ==" not in r.replace('"', "").replace("'", "")
    ]


def _name(requirement: str) -> str:
    return re.split(r"[<>=!~\[ ;]", requirement, maxsplit=1)[0]


def _dependency(requirement: str) -> Dependency:
    package = _name(requirement)
    module = module_for(package)
    try:
        importlib.import_module(module)
        error = None
    except Exception as exc:  # ImportError, or a broken package raising anything at import
        error = f"{type(exc).__name__}: {exc}"
    return Dependency(requirement, package, module, error)


def _has_entry_point(group: str, name: str) -> bool:
    try:
        found = importlib.metadata.distribution(DISTRIBUTION).entry_points
    except importlib.metadata.PackageNotFoundError:
        return False
    return any(ep.group == group and ep.name == name for ep in found)
