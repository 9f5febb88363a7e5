"""``benchmarks/vllm_engine.py --combine``: the committed engine table is what the script renders from the
committed raw results of its H200 calls (one release per call), and a file that is not a stage's results is
refused with a clear line, not a traceback."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from benchmark_modules import BENCHMARKS, load

load("engine_session")  # vllm_engine imports it from beside it: registered first, it is found
engine = load("vllm_engine")

RESULTS = BENCHMARKS / "results"
GDN_024 = "vllm_engine.gdn.0.24.0.json"
SAMPLER_024 = "vllm_engine.sampler.0.24.0.json"
SAMPLER_026 = "vllm_engine.sampler.0.26.0.json"
FIRSTUSE_024 = "vllm_engine.firstuse.0.24.0.json"
CALLS = [GDN_024, SAMPLER_024, SAMPLER_026, FIRSTUSE_024]  # the order the committed table holds them in


def test_the_committed_table_is_rendered_from_the_committed_calls(tmp_path: Path) -> None:
    assert engine.main(["--combine", *(str(RESULTS / c) for c in CALLS), "--out", str(tmp_path)]) == 0
    rendered = (tmp_path / "vllm_engine.md").read_text()
    assert rendered == (RESULTS / "vllm_engine.md").read_text()
    rows = [line for line in rendered.splitlines() if line.startswith("| sampler")]
    assert len(rows) == 9
    assert {"0.24.0", "0.26.0"} == {row.split(" | ")[1] for row in rows}
    gdn = [line.split(" | ") for line in rendered.splitlines() if line.startswith("| gdn")]
    assert [row[2] for row in gdn] == [
        "stock, auto",
        "jitguard, auto",
        "jitguard, --gdn-prefill-backend flashinfer",
    ]
    assert all(row[-1].startswith("yes") for row in gdn)
    assert "vLLM 0.24.0 (flashinfer-python 0.6.12), vLLM 0.26.0 (flashinfer-python 0.6.14)" in rendered


@pytest.mark.parametrize(
    "text",
    [
        '{"rows": [{"no_such_field": 1}]}',  # a row of something else
        '{"rows": [], "notes": []}',  # no machine
        "[1, 2]",  # not a record
        '{"rows": [], "notes": [], "machine": {"releases": [1]}}',  # a release that is not one
        "not json",
    ],
)
def test_a_file_that_is_not_a_stages_results_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str
) -> None:
    good = RESULTS / SAMPLER_024
    wrong = tmp_path / "wrong.json"
    wrong.write_text(text)
    assert engine.main(["--combine", str(good), str(wrong), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert f"{wrong} is not a stage's results" in err
    assert not (tmp_path / "out").exists()


def test_a_run_tables_an_earlier_calls_stage_with_both_releases_in_the_header(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An earlier call on the warm host ran another release (its stage kept in KEPT); this call's table holds
    both calls' rows, and its header names both releases, not only this call's."""
    kept = tmp_path / "kept"
    kept.mkdir()
    (kept / "vllm_engine.firstuse.json").write_text((RESULTS / FIRSTUSE_024).read_text())
    this_call = json.loads((RESULTS / SAMPLER_026).read_text())  # what the sampler stage "ran"
    site = SimpleNamespace(vllm="0.26.0", flashinfer="0.6.14", path=Path("/tmp/site"))
    monkeypatch.setattr(engine, "KEPT", kept)
    monkeypatch.setattr(engine.Site, "of", staticmethod(lambda path: site))
    monkeypatch.setattr(engine, "restore_leftovers", lambda: None)
    monkeypatch.setattr(engine, "machine", lambda sites: dict(this_call["machine"]))
    monkeypatch.setitem(
        engine.STAGE_RUNNERS, "sampler", lambda run, notes: [engine.Row(**r) for r in this_call["rows"]]
    )
    out = tmp_path / "out"
    assert engine.main(["--stage", "sampler", "--site", "/tmp/site", "--out", str(out)]) == 0
    rendered = (out / "vllm_engine.md").read_text()
    assert "vLLM 0.26.0 (flashinfer-python 0.6.14), vLLM 0.24.0 (flashinfer-python 0.6.12)" in rendered
    rows = [line.split(" | ")[1] for line in rendered.splitlines() if line.startswith("| sampler")]
    assert rows == ["0.26.0"] * 3 + ["0.24.0"] * 3
    assert sorted(p.name for p in out.glob("*.json")) == [
        "vllm_engine.firstuse.json",
        "vllm_engine.sampler.json",
    ]
