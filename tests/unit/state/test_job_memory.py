"""Learned memory per compile job: the estimate the budget plans with, per module."""

from __future__ import annotations

from pathlib import Path

from jitguard.state.job_memory import KEEP, MIN_OBSERVATION_BYTES, JobMemoryStore

GIB = 1024**3


def test_nothing_learned_is_none(tmp_path: Path) -> None:
    assert JobMemoryStore(tmp_path).estimate("gdn_prefill_sm90") is None


def test_the_estimate_is_the_largest_recent_observation(tmp_path: Path) -> None:
    store = JobMemoryStore(tmp_path)
    store.observe("m", 5 * GIB)
    store.observe("m", 6 * GIB)
    store.observe("m", 4 * GIB)
    assert store.estimate("m") == 6 * GIB
    assert store.estimate("other") is None


def test_only_the_last_few_observations_count(tmp_path: Path) -> None:
    store = JobMemoryStore(tmp_path)
    store.observe("m", 9 * GIB)  # an old outlier ages out
    for _ in range(KEEP):
        store.observe("m", 2 * GIB)
    assert store.estimate("m") == 2 * GIB


def test_tiny_observations_are_ignored(tmp_path: Path) -> None:
    store = JobMemoryStore(tmp_path)
    assert store.observe("m", MIN_OBSERVATION_BYTES - 1) is None
    assert store.estimate("m") is None


def test_a_corrupt_record_means_nothing_learned(tmp_path: Path) -> None:
    store = JobMemoryStore(tmp_path)
    store.observe("m", 3 * GIB)
    (tmp_path / "job_memory" / "m.json").write_text('{"schema": "jitguard.job-memory/1", "module": "m", "obs')
    assert store.estimate("m") is None
    store.observe("m", 3 * GIB)  # and learning starts over
    assert store.estimate("m") == 3 * GIB


def test_clear_one_module_or_all(tmp_path: Path) -> None:
    store = JobMemoryStore(tmp_path)
    store.observe("a", GIB)
    store.observe("b", GIB)
    assert [m.module for m in store.all()] == ["a", "b"]
    assert store.clear("a") == 1
    assert [m.module for m in store.all()] == ["b"]
    assert store.clear() == 1
    assert store.all() == []
