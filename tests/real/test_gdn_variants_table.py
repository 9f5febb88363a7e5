"""``benchmarks/gdn_variants.py``: the committed table is what the script renders from the committed rows of its
H200 calls, and a full build that took two device calls (timed out, then ``--resume``) is one row adding both
calls up; a build that never finished gives lower bounds, said as such."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from benchmark_modules import BENCHMARKS, load

variants = load("gdn_variants")
RESULTS = BENCHMARKS / "results"
GIB = 1024**3


def _build(
    stage: str, version: str, wall: float, cpu: float, peak_gib: int, tus: int, **more: Any
) -> dict[str, Any]:
    """A build row as ``build()`` writes it (the fields the table reads)."""
    return {
        "stage": stage,
        "flashinfer": version,
        "module": f"{stage}-module",
        "jobs": 16,
        "max_cicc": 16,
        "wall_s": wall,
        "cpu_s": cpu,
        "peak_rss_bytes": peak_gib * GIB,
        "status": "built",
        "tus_compiled": tus,
        **more,
    }


TIMED_OUT = _build("full", "0.6.12", 530.0, 8000.0, 90, 48, status="failed")  # a first call at its limit
RESUMED = _build("full", "0.6.12", 200.0, 2400.0, 80, 66, resumed=True)  # the next call: the rest
SUBSET = _build("subset", "0.6.12", 120.0, 200.0, 8, 3, max_cicc=2)


def _render(tmp_path: Path, rows: list[dict[str, Any]]) -> str:
    (tmp_path / "gdn_variants.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    variants.write_markdown(tmp_path)
    return (tmp_path / "gdn_variants.md").read_text()


def test_the_committed_table_is_rendered_from_the_committed_rows(tmp_path: Path) -> None:
    shutil.copyfile(RESULTS / "gdn_variants.jsonl", tmp_path / "gdn_variants.jsonl")
    variants.write_markdown(tmp_path)
    assert (tmp_path / "gdn_variants.md").read_text() == (RESULTS / "gdn_variants.md").read_text()


def test_a_resumed_full_build_is_one_row_of_both_calls(tmp_path: Path) -> None:
    text = _render(tmp_path, [TIMED_OUT, RESUMED, {**SUBSET, "note": "ran alone"}])
    assert "| 0.6.12 | full-module | 66 | 16 | 730.0 | 10400.0 | 90.0 | 16 | built (2 calls) |" in text
    assert "| 0.6.12 | 1/52.0 | 1/11.2 | 1/6.1 | 120.0 |" in text  # 10400/200, 90/8, 730/120: exact, no ">="
    assert "- 0.6.12 subset-module: ran alone" in text


def test_a_full_build_that_never_finished_gives_lower_bounds(tmp_path: Path) -> None:
    text = _render(tmp_path, [TIMED_OUT, SUBSET])
    assert "| 0.6.12 | >= 1/40.0 | >= 1/11.2 | >= 1/4.4 | 120.0 |" in text
    assert "stopped at its timeout after 48 TUs" in text


def test_a_resumed_row_after_another_versions_build_stays_its_own() -> None:
    other = _build("full", "0.6.6", 300.0, 4000.0, 90, 34)
    builds = variants.combined([other, RESUMED])
    assert [(b["flashinfer"], b["wall_s"], b.get("calls")) for b in builds] == [
        ("0.6.6", 300.0, None),
        ("0.6.12", 200.0, None),
    ]
