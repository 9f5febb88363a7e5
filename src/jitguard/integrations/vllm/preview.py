"""Every FlashInfer choice vLLM would make here, with jitguard's verdict, before an engine starts
(``jitguard doctor --engine vllm``). The same statuses the plugin takes inside the engine, from the same facts
and failure cache; what a user can only say on vLLM's command line (``--gdn-prefill-backend``,
``--attention-backend``, ``--moe-backend``) is shown as both outcomes: picked by vLLM, named by you."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from jitguard.decision.engine_release import Coverage, covers
from jitguard.decision.engine_verdicts import CHOICES, ChoiceStatus, verdict
from jitguard.integrations.vllm import SITES, attention, coverage, predicates, sampler
from jitguard.integrations.vllm.sites import Site
from jitguard.status.engine_choices import status_of

if TYPE_CHECKING:
    from jitguard.facts import Facts


@dataclass(frozen=True)
class Row:
    status: ChoiceStatus
    site: Site | None  # where the installed vLLM makes it (the newest layout when vLLM is not installed)
    named_now: str | None  # named by this environment's variables (flags are not visible here)

    @property
    def if_picked(self) -> str:
        return verdict(self.status, named=False).action

    @property
    def if_named(self) -> str:
        return verdict(self.status, named=True).action

    def to_json(self) -> dict[str, Any]:
        return {
            **self.status.choice.to_json(),
            "site": self.site.to_json() if self.site else None,
            **self.status.to_json(),
            "if_picked": self.if_picked,
            "if_named": self.if_named if self.status.choice.named_by else None,
            "named_now": self.named_now,
        }


@dataclass(frozen=True)
class Preview:
    version: str | None  # the installed vLLM, or None
    rows: tuple[Row, ...]
    coverage: Coverage | None = None  # which choice sites the installed vLLM still has (None: not installed)
    drift: str | None = None  # the warning when the installed vLLM is outside the releases jitguard knows

    def to_json(self) -> dict[str, Any]:
        return {
            "name": "vllm",
            "version": self.version,
            "choices": [r.to_json() for r in self.rows],
            "coverage": self.coverage.to_json() if self.coverage else None,
            "drift": self.drift,
        }


def preview(facts: Facts, cache_dir: Path) -> Preview:
    version = _vllm_version(facts)
    rows = []
    for choice in CHOICES:
        key = "attention" if choice.key == "kv-cache" else choice.key  # one site judges both
        sites = [s for s in SITES if s.choice.key == key]
        site = next(
            (s for s in sites if version and covers(s.releases, version)), sites[0] if sites else None
        )
        rows.append(Row(status_of(choice, facts, cache_dir), site, _named_now(choice.key)))
    if version is None:
        return Preview(version, tuple(rows))

    return Preview(version, tuple(rows), coverage.coverage(version), coverage.drift_warning(version))


def _vllm_version(facts: Facts) -> str | None:
    try:
        return facts.packages.version("vllm")
    except Exception:  # an unavailable packages fact: shown as not installed
        return None


def _named_now(key: str) -> str | None:
    """Named by this environment's variables; vLLM's flags live on its command line, out of sight here."""
    if key == "sampler":
        return sampler.named()
    if key in ("attention", "kv-cache"):
        return attention.env_named()
    if key == "moe":
        return predicates.moe_env_named()
    return None
