"""Finding codes of the 'jitguard' area: jitguard's own installation and its own faults (docs/failsafe.md).
A fault of jitguard never blocks a backend: it makes a verdict unknown and says how to repair jitguard."""

from __future__ import annotations

from jitguard.findings.model import CatalogEntry, FixTemplate

_AREA = "jitguard"
_REPORT = FixTemplate(
    "If that does not explain it, report a jitguard bug with the output of:", "jitguard doctor --json"
)
_BYPASS = FixTemplate("To run without jitguard meanwhile:", "export JITGUARD_DISABLE=1")

ENTRIES: tuple[CatalogEntry, ...] = (
    CatalogEntry(
        code="fact-unavailable",
        severity="warning",
        title="jitguard could not collect the {fact} facts",
        cause=(
            "Probing {fact} raised {error}. The checks that need it were skipped, so this verdict is "
            "unverified: jitguard neither rules the backend out on them nor reports it as passing."
        ),
        fixes=(FixTemplate("{repair}", "{repair_command}"), _REPORT),
        area=_AREA,
    ),
    CatalogEntry(
        code="jitguard-dependency-missing",
        severity="error",
        title="jitguard's dependency {package} cannot be imported",
        cause=(
            "`import {module}` failed: {error}. jitguard needs {package} ({requirement}) for some of its "
            "checks; without it those checks are skipped and their verdicts stay unknown."
        ),
        fixes=(FixTemplate("Install it into this environment:", "pip install '{requirement}'"), _BYPASS),
        area=_AREA,
    ),
    CatalogEntry(
        code="jitguard-entry-point-missing",
        severity="warning",
        title="jitguard's {group} entry point is not installed",
        cause=(
            "The installed jitguard distribution declares no `{name}` entry point in the group `{group}`, so "
            "{effect}. This happens with a copy of the sources on PYTHONPATH instead of an installed package."
        ),
        fixes=(FixTemplate("Install jitguard as a package (from its checkout):", "pip install ."),),
        area=_AREA,
    ),
    CatalogEntry(
        code="jitguard-version-mismatch",
        severity="warning",
        title="the jitguard code that runs is not the installed jitguard",
        cause=(
            "The imported package says version {imported} (from {location}); the installed distribution's "
            "metadata says {installed}. A half-finished upgrade or a second copy on sys.path: the plugin and "
            "the CLI may run different code."
        ),
        fixes=(FixTemplate("Reinstall jitguard so the two agree:", "pip install --force-reinstall ."),),
        area=_AREA,
    ),
    CatalogEntry(
        code="jitguard-fault",
        severity="warning",
        title="jitguard failed inside {where}; {then}",
        cause=(
            "{error}. jitguard never makes the engine worse than it would be without it, so this path "
            "continues as it would without jitguard."
        ),
        fixes=(FixTemplate("{repair}", "{repair_command}"), _REPORT, _BYPASS),
        area=_AREA,
    ),
    CatalogEntry(
        code="config-invalid",
        severity="error",
        title="{name}={value} is not a value jitguard accepts",
        cause=(
            "{name} ({meaning}) accepts {accepted}. Every jitguard command that reads it stops on it with exit code "
            "2 (`jitguard doctor` lists every such variable at once) until it is fixed."
        ),
        fixes=(
            FixTemplate("Unset it to get its default ({default}):", "unset {name}"),
            FixTemplate("Or set it to an accepted value, e.g.:", "export {name}={example}"),
        ),
        area=_AREA,
    ),
    CatalogEntry(
        code="config-unknown",
        severity="warning",
        title="{name} is not a variable jitguard reads",
        cause=(
            "jitguard reads no variable of that name, so {name} has no effect (a misspelt one reads as "
            'unset). README.md, "Settings", lists the variables jitguard reads.'
        ),
        fixes=(
            FixTemplate(
                "Did you mean {suggestion}? Rename it:", 'export {suggestion}="${name}" && unset {name}'
            ),
            FixTemplate("Or remove it:", "unset {name}"),
        ),
        area=_AREA,
    ),
)
