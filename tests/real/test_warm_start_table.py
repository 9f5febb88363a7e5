"""``benchmarks/warm_start.py --table``: the committed warm-start table and chart are what the script renders from
the committed results of its H200 runs and the engines' own logs, and its goals are read from those rows."""

from __future__ import annotations

from pathlib import Path

from benchmark_modules import BENCHMARKS, load

load("engine_session")  # warm_start imports it from beside it: registered first, it is found
warm = load("warm_start")

RESULTS = BENCHMARKS / "results"


def test_the_committed_table_and_chart_are_rendered_from_the_committed_runs(tmp_path: Path) -> None:
    args = ["--table", str(RESULTS / "warm_start.jsonl"), "--logs", str(RESULTS / "warm_start_logs")]
    assert warm.main([*args, "--out", str(tmp_path)]) == 0
    assert (tmp_path / "warm_start.md").read_text() == (RESULTS / "warm_start.md").read_text()
    assert (tmp_path / "warm_start.svg").read_text() == (RESULTS / "warm_start.svg").read_text()


def test_the_numbers_come_from_the_engines_logs() -> None:
    rows, _meta = warm.load([RESULTS / "warm_start.jsonl"])
    first = next(r for r in rows if r["name"].startswith("jitguard first host"))
    again = warm.reparse(first, [RESULTS / "warm_start_logs"])
    assert again["torch_compile_s"] > 0 and again["profile_s"] > 0  # vLLM's own lines, read by this script
    assert again["cutedsl_compile_s"] > 0  # jitguard's "compiled the CuTeDSL kernel ... in N s" lines


def test_a_goal_not_met_says_so() -> None:
    base = {"stage": "v026", "restore_s": 1.0, "fetched_bytes": 0, "restorer": False}
    rows = [
        {**base, "name": "stock cold", "ready_s": 100.0},
        {**base, "name": "jitguard warm host", "ready_s": 40.0},
        {**base, "name": "jitguard new host (restored from the store)", "ready_s": 60.0},
    ]
    text = "\n".join(warm.goals(rows))
    assert "60.0 s <= 45.0 s: NOT met" in text and "60% of 100.0 s: NOT met" in text
