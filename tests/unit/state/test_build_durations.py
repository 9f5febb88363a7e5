"""Learned build durations: recorded per module and host, read back, and a bad or foreign record is a miss."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from jitguard.state.build_durations import BuildDurationStore, host_identity


def test_a_recorded_build_is_read_back(tmp_path: Path) -> None:
    store = BuildDurationStore(tmp_path)
    assert store.read("gdn_prefill_sm90") is None
    recorded = store.record("gdn_prefill_sm90", wall_s=372.5, steps=34, jobs=8)
    assert recorded is not None
    learned = BuildDurationStore(tmp_path).read("gdn_prefill_sm90")
    assert learned is not None
    assert (learned.wall_s, learned.steps, learned.jobs, learned.host) == (372.5, 34, 8, host_identity())
    assert store.read("sampling") is None


def test_the_last_build_replaces_the_one_before(tmp_path: Path) -> None:
    store = BuildDurationStore(tmp_path)
    store.record("m", wall_s=100, steps=10, jobs=2)
    store.record("m", wall_s=40, steps=10, jobs=4)
    learned = store.read("m")
    assert learned is not None and (learned.wall_s, learned.jobs) == (40, 4)


@pytest.mark.parametrize(
    ("wall_s", "steps", "jobs"), [(0.0, 3, 1), (5.0, 0, 1), (5.0, 3, 0), (float("nan"), 3, 1)]
)
def test_a_build_without_steps_or_time_is_not_recorded(
    tmp_path: Path, wall_s: float, steps: int, jobs: int
) -> None:
    store = BuildDurationStore(tmp_path)
    assert store.record("m", wall_s=wall_s, steps=steps, jobs=jobs) is None
    assert store.read("m") is None


@pytest.mark.parametrize(
    "text",
    [
        "{not json",
        "[]",
        '{"schema": "jitguard.build-duration/1", "module": "m", "host": "%s", "wall_s": "ten", "steps": 3, '
        '"jobs": 1}',
        '{"schema": "jitguard.build-duration/1", "module": "m", "host": "%s", "wall_s": 10, "steps": true, '
        '"jobs": 1}',
        '{"schema": "jitguard.build-duration/1", "module": "other", "host": "%s", "wall_s": 10, "steps": 3, '
        '"jobs": 1}',
        '{"schema": "jitguard.build-duration/9", "module": "m", "host": "%s", "wall_s": 10, "steps": 3, '
        '"jobs": 1}',
    ],
)
def test_a_corrupt_record_is_a_miss(tmp_path: Path, text: str) -> None:
    store = BuildDurationStore(tmp_path)
    store.record("m", wall_s=10, steps=3, jobs=1)
    (path,) = (tmp_path / "build_durations").iterdir()
    path.write_text(text.replace("%s", host_identity()))
    assert store.read("m") is None


def test_another_hosts_record_is_not_used(tmp_path: Path) -> None:
    BuildDurationStore(tmp_path, host="gpu-node-7").record("m", wall_s=900, steps=34, jobs=2)
    assert BuildDurationStore(tmp_path).read("m") is None
    assert BuildDurationStore(tmp_path, host="gpu-node-7").read("m") is not None
    # Nor one copied under this host's file name: the record names its host.
    (other,) = (tmp_path / "build_durations").iterdir()
    mine = BuildDurationStore(tmp_path)._path("m")
    mine.write_text(other.read_text())
    assert json.loads(mine.read_text())["host"] == "gpu-node-7"
    assert BuildDurationStore(tmp_path).read("m") is None


def test_a_read_only_cache_is_not_an_error(tmp_path: Path) -> None:
    (tmp_path / "build_durations").write_text("a file where the directory goes")
    assert BuildDurationStore(tmp_path).record("m", wall_s=10, steps=3, jobs=1) is None


def test_the_duration_scales_with_steps_and_jobs(tmp_path: Path) -> None:
    learned = BuildDurationStore(tmp_path).record("m", wall_s=400, steps=40, jobs=4)
    assert learned is not None
    assert learned.seconds_for(40, 4) == pytest.approx(400)
    assert learned.seconds_for(10, 4) == pytest.approx(100)
    assert learned.seconds_for(40, 2) == pytest.approx(800)  # half the jobs: twice the time
    assert learned.seconds_for(2, 8) == pytest.approx(10 * 2 * 4 / 2)  # 8 jobs for 2 steps: 2 run at once
