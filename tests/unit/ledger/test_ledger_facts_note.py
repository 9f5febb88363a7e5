"""jitguard's own cost, explained: the start ledger's facts phase names the slowest probes of this process's
one collection (real facts of this machine, their timings as collect() measured them)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from jitguard.boundary import process_facts
from jitguard.facts import collect
from jitguard.ledger import history, start, tally


@pytest.fixture(autouse=True)
def _fresh(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.delenv(tally.START_ID, raising=False)
    start.forget()
    yield
    start.forget()
    process_facts.replace()


def test_the_facts_phase_names_the_slowest_probes(tmp_path: Path) -> None:
    env = {"HOME": str(tmp_path / "home"), "PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    facts = collect(env, cache_dir=tmp_path / "cache")
    assert {"toolchain", "packages", "gpu", "link"} <= set(facts.seconds)
    assert all(seconds >= 0 for seconds in facts.seconds.values())
    start.begin("vllm", cache_dir=tmp_path / "cache")
    process_facts.replace(lambda: facts).get()
    start.ready("engine-core")
    (joined,) = history.read_starts(tmp_path / "cache")
    (record,) = joined.processes
    (note,) = [n for n in record.notes if n.startswith("facts:")]
    slowest = max(facts.seconds, key=lambda name: facts.seconds[name])
    assert note.startswith(f"facts: the slowest probes: {slowest} ")
