"""``benchmarks/cutedsl_engine.py`` keeps within its ``--budget`` (one device call): each engine is limited to
what is left, a row is not started with too little left (the table says which), and the results are rewritten
after every row, so a run cut short keeps what it finished. The engines are stand-ins here (no vLLM on CPU)."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from benchmark_modules import load

session = load("engine_session")  # cutedsl_engine imports its Budget from beside it: registered first
engine = load("cutedsl_engine")


def test_rows_share_the_budget_and_each_row_is_kept_as_it_ends(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = [1000.0]
    limits: list[float] = []
    rows_on_disk: list[int] = []
    out = tmp_path / "results" / "cutedsl_engine"

    def start(model: Path, env: dict[str, str], log: Path, limit_s: float) -> dict[str, Any]:
        jsonl = out.with_suffix(".jsonl")
        rows_on_disk.append(len(jsonl.read_text().splitlines()) - 1 if jsonl.exists() else 0)
        limits.append(limit_s)
        clock[0] += 100.0  # each engine takes 100 s
        return {
            "exit": 0,
            "ready_s": 90.0,
            "ttft_s": 0.5,
            "generated": 8,
            "log": [f"jitguard: {env.get('JITGUARD_DISABLE')}"],
        }

    monkeypatch.setattr(session, "time", SimpleNamespace(monotonic=lambda: clock[0]))  # the budget's clock
    monkeypatch.setattr(engine, "subprocess", SimpleNamespace(run=lambda *args, **kwargs: None))
    monkeypatch.setattr(engine, "start_engine", start)
    engine.main(["--work", str(tmp_path / "work"), "--out", str(out), "--budget", "330"])

    assert limits == [330.0, 230.0, 130.0]  # what was left each time (under the 420 s cap)
    assert rows_on_disk == [0, 1, 2]  # every finished row was on disk before the next engine started
    lines = out.with_suffix(".jsonl").read_text().splitlines()
    assert json.loads(lines[0])["meta"]["skipped"] == ["stock after", "jitguard warm again"]
    assert [json.loads(line)["label"] for line in lines[1:]] == [
        "stock (warms Triton)",
        "jitguard cold",
        "jitguard warm",
    ]
    md = out.with_suffix(".md").read_text()
    assert "Not started (the run's budget was spent): stock after, jitguard warm again." in md
    assert "| jitguard warm | 90.0 | 0.50 | 8 | 0 |" in md
    assert "- stock (warms Triton): `jitguard: 1`" in md  # the stock rows ran with JITGUARD_DISABLE=1
