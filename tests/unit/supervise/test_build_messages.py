"""A build that did not give a module says one thing in its first line: it failed, it was not started, or it
was not retried; never two of them at once. The real pre-flight and failure cache on this machine's facts, the
real runner (a lock wait given up: tests/faults/test_shared_builds.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from jitguard.errors import BuildFailed, CachedBuildFailure
from jitguard.facts import Facts, collect
from jitguard.flashinfer_jit.flashinfer_build import check_before_build
from jitguard.state.failure_cache import FailureCache
from jitguard.supervise.runner import BuildOptions, run_ninja

VERDICTS = ("failed", "not started", "not retried")


def says_one_thing(exc: BuildFailed) -> str:
    head = str(exc).splitlines()[0]
    assert head == exc.headline + "."
    said = [v for v in VERDICTS if v in head.split(":", 1)[0]]
    assert said == [exc.outcome], head
    assert head.count("failed") <= 1 and not ("failed" in head and "not started" in head), head
    return head


def doomed_facts(tmp_path: Path) -> Facts:
    """This machine as it is: no libcuda, so pre-flight dooms any FlashInfer build."""
    facts = collect({"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": str(tmp_path)}, cache_dir=tmp_path / "c")
    if facts.link.cuda_links:
        pytest.skip("this host can link -lcuda; the doomed case needs it missing")
    return facts


def test_a_build_pre_flight_stops_is_not_started(tmp_path: Path) -> None:
    facts, cache = doomed_facts(tmp_path), FailureCache(tmp_path / "cache")
    with pytest.raises(BuildFailed) as stopped:
        check_before_build("gdn_prefill_sm90", facts, cache)
    head = says_one_thing(stopped.value)
    assert head == "Build of gdn_prefill_sm90 not started: pre-flight found that it cannot succeed here."


def test_a_build_the_failure_cache_answers_is_not_retried(tmp_path: Path) -> None:
    facts, cache = doomed_facts(tmp_path), FailureCache(tmp_path / "cache")
    with pytest.raises(BuildFailed):
        check_before_build("gdn_prefill_sm90", facts, cache)
    with pytest.raises(CachedBuildFailure) as cached:
        check_before_build("gdn_prefill_sm90", facts, cache)
    head = says_one_thing(cached.value)
    assert head.startswith("Build of gdn_prefill_sm90 not retried: it failed ")
    assert "jitguard cache clear --module gdn_prefill_sm90 --yes" in head


def test_a_build_without_ninja_is_not_started(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "build.ninja").write_text("rule x\n  command = true\nbuild out: x\n")
    (tmp_path / "bin").mkdir()
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))  # a PATH without ninja
    options = BuildOptions(cache_dir=tmp_path / "cache", progress="none")
    with pytest.raises(BuildFailed) as stopped:
        run_ninja(tmp_path, tmp_path / "build.ninja", module="m", options=options)
    assert says_one_thing(stopped.value) == "Build of m not started: ninja is not installed."


def test_a_build_that_ran_and_failed_says_failed(tmp_path: Path) -> None:
    (tmp_path / "build.ninja").write_text("rule x\n  command = false\nbuild out: x\n")
    options = BuildOptions(cache_dir=tmp_path / "cache", progress="none")
    with pytest.raises(BuildFailed) as failed:
        run_ninja(tmp_path, tmp_path / "build.ninja", module="m", options=options)
    assert says_one_thing(failed.value).startswith("Build of m failed: ninja exited with status 1")
