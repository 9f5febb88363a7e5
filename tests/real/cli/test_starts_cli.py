"""`jitguard starts` as a real process over ledgers written by the ledger's own code: the starts side by
side, `--check`'s exit codes for every case must-hit knows, the --json envelope against its schema, and a
bad --last as a usage error (exit 2)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from envelope_schemas import assert_rejected, schema_errors
from jitguard.ledger import history
from jitguard.ledger.record import LayerCounts, Miss, ProcessRecord, Warm

COVERED = Warm("require", "restored", "default", ("triton", "inductor"))


def _run(cache: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("JITGUARD_")}
    env["JITGUARD_CACHE_DIR"] = str(cache)
    return subprocess.run(
        [sys.executable, "-m", "jitguard", "starts", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def _write(cache: Path, start: str, began: float, **kwargs: object) -> None:
    record = ProcessRecord(start, 100, "vllm", "engine-core", began, ready_at=began + 40, **kwargs)  # type: ignore[arg-type]
    history.write(record, cache)
    os.utime(cache / "starts" / start, (began, began))


@pytest.fixture
def cache(tmp_path: Path) -> Path:
    return tmp_path / "cache"


def test_the_last_starts_are_shown_side_by_side_newest_first(cache: Path) -> None:
    _write(cache, "cold", 1000.0, layers={"triton": LayerCounts(compiled=40, seconds=90.0)})
    _write(
        cache,
        "warm",
        2000.0,
        layers={"triton": LayerCounts(cached=40, seconds=2.0), "cutedsl": LayerCounts(restored=4)},
        phases={"restore": 0.2},
        warm=COVERED,
    )
    done = _run(cache, "--last", "2")
    assert done.returncode == 0, done.stderr
    header, *rows = done.stdout.splitlines()
    assert header.split() == ["warm", "cold"]
    assert any(
        r.split()[:1] == ["triton"] and "0 / 40 / 0 (2.0 s)" in r and "40 / 0 / 0 (90.0 s)" in r for r in rows
    )
    assert any(r.startswith("cutedsl") for r in rows)
    assert "must-hit: " not in done.stdout  # no --check asked


@pytest.mark.parametrize(
    ("kwargs", "code", "said"),
    [
        ({"warm": COVERED, "layers": {"triton": LayerCounts(cached=3)}}, 0, "must-hit: passed"),
        (
            {
                "warm": COVERED,
                "layers": {"triton": LayerCounts(compiled=2, cached=3)},
                "misses": (Miss("triton", "add", "Triton's cache has no kernel for its key 1f"),),
            },
            1,
            "compiled what its warm snapshot 'default' covers: triton 2",
        ),
        ({"layers": {"triton": LayerCounts(cached=3)}}, 1, "not covered by a warm snapshot"),
        # TileLang is in no snapshot: what it compiles is not must-hit's business.
        ({"warm": COVERED, "layers": {"tilelang": LayerCounts(compiled=1)}}, 0, "must-hit: passed"),
    ],
    ids=["hit", "miss", "no-snapshot", "uncovered-layer"],
)
def test_check_exits_1_exactly_when_the_last_start_compiled_what_its_snapshot_covers(
    cache: Path, kwargs: dict, code: int, said: str
) -> None:
    _write(cache, "older", 1000.0, warm=COVERED, layers={"triton": LayerCounts(compiled=9)})  # not the last
    _write(cache, "last", 2000.0, **kwargs)
    done = _run(cache, "--check")
    assert done.returncode == code and said in done.stdout, done.stdout + done.stderr
    if code == 1 and "misses" in kwargs:
        assert "triton: add: Triton's cache has no kernel for its key 1f" in done.stdout
    envelope = _run(cache, "--check", "--json")
    payload = json.loads(envelope.stdout)
    assert schema_errors(payload) == [] and envelope.returncode == code == payload["exit_code"]
    assert payload["check"]["start_id"] == "last" and payload["check"]["passed"] is (code == 0)


def test_check_without_any_start_fails_and_says_what_to_do(cache: Path) -> None:
    done = _run(cache, "--check")
    assert done.returncode == 1 and "start the engine once with jitguard installed" in done.stdout


@pytest.mark.parametrize("bad", ["0", "many", "-3"])
def test_a_bad_last_is_a_usage_error(cache: Path, bad: str) -> None:
    done = _run(cache, "--last", bad)
    assert done.returncode == 2 and "--last" in done.stderr and "Traceback" not in done.stderr
    envelope = _run(cache, "--json", "--last", bad)
    assert json.loads(envelope.stdout)["schema"] == "jitguard.error/1"


@pytest.mark.parametrize(
    "defect", ["passed-check-exit-1", "failed-check-exit-0", "unknown-layer", "negative-count"]
)
def test_the_starts_schema_rejects_a_real_defect(cache: Path, defect: str) -> None:
    _write(cache, "last", 2000.0, warm=COVERED, layers={"triton": LayerCounts(compiled=1)})
    payload = json.loads(_run(cache, "--check", "--json").stdout)
    assert schema_errors(payload) == []
    start = payload["starts"][0]
    if defect == "passed-check-exit-1":
        payload["check"]["passed"], payload["exit_code"] = True, 1
    elif defect == "failed-check-exit-0":
        payload["exit_code"] = 0
    elif defect == "unknown-layer":
        start["layers"]["cuda-graphs"] = start["layers"]["triton"]
    else:
        start["layers"]["triton"]["compiled"] = -1
    assert_rejected(payload)
