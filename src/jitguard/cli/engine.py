"""An inference engine's kernel choices and jitguard's verdict on each, for `jitguard doctor --engine NAME`.

``describe(engine, cache_dir)`` gives the rows (plain dicts, also the JSON payload), ``render(engine, rows)`` the text. The
flag itself belongs to `jitguard doctor` (cli/doctor.py): ``--engine`` with choices ``ENGINES``, then
``print(render(args.engine, describe(args.engine, settings.cache_dir, facts=facts)))``, or ``{"engine": ..., "choices": rows}`` in
the JSON envelope.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from jitguard.errors import UsageError
from jitguard.integrations.sglang import describe_choices

if TYPE_CHECKING:
    from jitguard.facts import Facts

ENGINES = ("sglang",)
TITLES = {"sglang": "SGLang"}


def describe(engine: str, cache_dir: Path, *, facts: Facts | None = None) -> list[dict[str, Any]]:
    """The rows for ``engine`` (one per choice), from ``facts`` (default: this machine's) and the failure cache
    under ``cache_dir``."""
    if engine == "sglang":
        return describe_choices(cache_dir, facts=facts)
    raise UsageError(f"--engine {engine!r} is not one jitguard knows; choose one of: {', '.join(ENGINES)}")


def render(engine: str, rows: Sequence[dict[str, Any]]) -> str:
    """The rows as a person reads them: per phase the option, when the engine picks FlashInfer by itself,
    whether FlashInfer can work here (with the first blocking finding) and what jitguard then does."""
    title = TITLES.get(engine, engine)
    head = rows[0] if rows else {}
    version = head.get("sglang")
    lines = [
        f"{title} {version}, linear attention (GDN), {head.get('layout')} choice:"
        if version
        else f"{title} is not installed here; what its plugin would decide on this machine:"
    ]
    for row in rows:
        lines.append(f"  {row['phase']:<8} {row['option']} (or {row['also']})")
        if row.get("sglang_picks_flashinfer"):
            lines.append(f"           {title} picks FlashInfer by itself: {row['sglang_picks_flashinfer']}")
        primary = row.get("primary")
        if row["flashinfer_usable"]:
            lines.append("           FlashInfer here: can work")
        elif primary:
            lines.append(f"           FlashInfer here: cannot work: [{primary['code']}] {primary['title']}")
            fixes = primary.get("fixes") or []
            if fixes:
                fix = fixes[0]
                text = fix.get("text", "")
                command = fix.get("command")
                lines.append(f"             Fix: {text}" + (f" `{command}`" if command else ""))
        lines.append(
            f"           jitguard: {title}'s own FlashInfer -> {row['when_sglang_picks_flashinfer']}; "
            f"asked for by name -> {row['when_named']}"
        )
    return "\n".join(lines)
