"""Whether an engine release is one jitguard knows, and which of its choices jitguard can still find: the pure
part of making drift loud.

``release_warning`` compares the installed release with the range a plugin knows (a ``SpecifierSet``);
``coverage`` folds what was found per site (``facts.source_names``) into one answer per choice. A choice
whose sites are alternative layouts (vLLM's GDN prefill moved twice) is found when any layout is; otherwise
every site the release should have must be found: one whose range covers it ('0.17+' open, '0.17-0.33'
closed once the engine dropped the name and the choice's other sites do its job). A release outside the known
range is judged by the nearest release jitguard knows.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from packaging.specifiers import SpecifierSet
from packaging.version import InvalidVersion, Version

from jitguard.facts.source_names import FOUND, SiteState


def release_warning(engine: str, version: str | None, supported: SpecifierSet, known: str) -> str | None:
    """One sentence when ``version`` lies outside ``supported`` (``known``: the same range as people write it,
    '0.17-0.33'); None when it lies inside, or no version is known."""
    if version is None:
        return None
    try:
        parsed = Version(version)
    except InvalidVersion:
        return None
    if supported.contains(parsed, prereleases=True):
        return None
    lowest = min((Version(s.version) for s in supported if s.operator == ">="), default=None)
    side = "older" if lowest is not None and parsed < lowest else "newer"
    return (
        f"jitguard: {engine} {version} is {side} than the releases jitguard knows ({known}): its choice sites "
        "were checked by name; upgrade jitguard (`pip install -U .` from a newer checkout) for a release it knows"
        + (", or use a known release of " + engine if side == "older" else "")
        + "."
    )


def covers(releases: str, version: str) -> bool:
    """Whether ``version`` (e.g. '0.24.0') lies in ``releases`` ('0.22-0.33', '0.17-0.18', '0.22+')."""
    low, dash, high = releases.rstrip("+").partition("-")
    minor = _minor(version)
    low_minor, high_minor = _minor(low), _minor(high) if high else None
    if minor is None or low_minor is None:
        return False
    if releases.endswith("+"):
        return low_minor <= minor
    return low_minor <= minor <= (high_minor if dash else low_minor)  # type: ignore[operator]


def _minor(version: str) -> int | None:
    parts = version.strip().split(".")
    try:
        return int(parts[1]) if len(parts) > 1 and parts[0] == "0" else None
    except ValueError:
        return None


@dataclass(frozen=True)
class SiteCheck:
    module: str
    target: str
    releases: str
    state: SiteState
    layout: bool = False  # one of several alternative layouts of its choice


@dataclass(frozen=True)
class ChoiceCoverage:
    key: str
    title: str
    missing: tuple[SiteCheck, ...]  # the sites not found, where that leaves the choice unguarded

    @property
    def found(self) -> bool:
        return not self.missing

    def to_json(self) -> dict[str, Any]:
        return {
            "choice": self.key,
            "title": self.title,
            "found": self.found,
            "missing": [
                {"module": s.module, "target": s.target, "releases": s.releases, "state": s.state}
                for s in self.missing
            ],
        }


@dataclass(frozen=True)
class Coverage:
    engine: str
    version: str | None
    choices: tuple[ChoiceCoverage, ...]

    @property
    def found(self) -> int:
        return sum(c.found for c in self.choices)

    @property
    def summary(self) -> str:
        """'vLLM 0.33.0: 6 of 6 choice sites found'."""
        release = f"{self.engine} {self.version}" if self.version else self.engine
        return f"{release}: {self.found} of {len(self.choices)} choice sites found"

    @property
    def unguarded(self) -> str | None:
        """'not guarded: FP8 KV cache (vllm.x.y: name not found)', or None when every choice was found."""
        parts = [
            f"{c.title} ({'; '.join(f'{s.module}.{s.target}: {s.state}' for s in c.missing)})"
            for c in self.choices
            if not c.found
        ]
        return "not guarded: " + ", ".join(parts) if parts else None

    def to_json(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "found": self.found,
            "total": len(self.choices),
            "summary": self.summary,
            "choices": [c.to_json() for c in self.choices],
        }


def choice_coverage(
    key: str, title: str, checks: Sequence[SiteCheck], version: str | None, known: tuple[str, str]
) -> ChoiceCoverage:
    """One choice's coverage from its sites' checks. ``known``: the oldest and newest release jitguard knows
    (a version outside them, or none, is judged as the nearest of them)."""
    judged = _nearest(version, known)
    layouts = [c for c in checks if c.layout]
    missing: list[SiteCheck] = []
    if layouts and not any(c.state == FOUND for c in layouts):
        due = [c for c in layouts if covers(c.releases, judged)]
        missing.extend(due or layouts[:1])
    missing.extend(c for c in checks if not c.layout and c.state != FOUND and covers(c.releases, judged))
    return ChoiceCoverage(key, title, tuple(missing))


def _nearest(version: str | None, known: tuple[str, str]) -> str:
    oldest, newest = known
    minor = _minor(version) if version else None
    if minor is None:
        return newest
    low, high = _minor(oldest), _minor(newest)
    if low is not None and minor < low:
        return oldest
    if high is not None and minor > high:
        return newest
    return version  # type: ignore[return-value]
