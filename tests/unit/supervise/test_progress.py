"""Reading ninja's progress and saying it."""

from __future__ import annotations

import logging

import pytest

from jitguard.state.build_durations import BuildDuration
from jitguard.supervise.progress import (
    BuildProgress,
    LogReporter,
    describe_remaining,
    make_reporter,
    parse_status,
    remaining_seconds,
    steps_total,
)


def test_status_lines_give_finished_and_total() -> None:
    assert parse_status("[3/34] /usr/local/cuda/bin/nvcc -c a.cu") == (3, 34)
    assert parse_status("ninja: Entering directory `/x'") is None
    assert parse_status("a.cu(12): warning: [1/2] is not a status") is None


def test_progress_moves_only_on_status_lines() -> None:
    progress = BuildProgress(module="gdn")
    assert progress.feed("[1/34] nvcc ...")
    assert not progress.feed("some compiler warning")
    assert progress.steps == "1/34"
    progress.peak_rss_bytes = progress.rss_bytes = 6 * 1024**3
    assert "1/34 steps" in progress.summary() and "6.0 GiB" in progress.summary()


def test_log_reporter_writes_periodic_lines(caplog: pytest.LogCaptureFixture) -> None:
    reporter = LogReporter(interval=0)
    progress = BuildProgress(module="gdn", jobs=4)
    progress.feed("[5/34] nvcc")
    with caplog.at_level(logging.INFO, logger="jitguard.supervise"):
        reporter.update(progress)
    assert "gdn: 5/34 steps, 4 jobs" in caplog.text


def test_reporter_choice_follows_the_stream_and_rejects_unknown_modes() -> None:
    class NotATerminal:
        def isatty(self) -> bool:
            return False

    assert isinstance(make_reporter("auto", stream=NotATerminal()), LogReporter)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="progress mode"):
        make_reporter("fancy")


def _learned(wall_s: float, steps: int, jobs: int) -> BuildDuration:
    return BuildDuration("gdn", "this-host", wall_s, steps, jobs, 0.0)


def test_no_estimate_before_two_steps_without_a_learned_duration() -> None:
    assert remaining_seconds(0, None, 30, 4, None) is None
    assert remaining_seconds(0, 34, 30, 4, None) is None
    assert remaining_seconds(1, 34, 30, 4, None) is None  # one step says little
    assert remaining_seconds(2, 34, 30, 4, None) == pytest.approx(15 * 32)  # the observed rate then
    assert remaining_seconds(34, 34, 500, 4, None) is None  # finished: nothing left to foresee


def test_a_learned_duration_is_scaled_to_the_steps_left() -> None:
    learned = _learned(340, 34, 4)  # 10 s a step with 4 jobs
    assert remaining_seconds(0, 34, 0, 4, learned) == pytest.approx(340)
    assert remaining_seconds(1, 34, 900, 4, learned) == pytest.approx(330)  # not the slow first step's rate
    assert remaining_seconds(0, 34, 0, 2, learned) == pytest.approx(680)  # half the jobs
    # A retry's ninja counts only what is left: the same per-step time.
    assert remaining_seconds(0, 10, 0, 4, learned) == pytest.approx(100)
    # Past a quarter of the steps this build's own rate says it.
    assert remaining_seconds(17, 34, 34, 4, learned) == pytest.approx(34)


def test_the_summary_says_how_long_is_left_only_with_a_basis() -> None:
    progress = BuildProgress(module="gdn", jobs=4)
    progress.feed("[1/34] nvcc")
    assert "left" not in progress.summary()
    progress.learned = _learned(3400, 34, 4)
    progress.feed("[2/34] nvcc")
    assert progress.summary().endswith("about 53 min left")
    assert describe_remaining(10) == "about 1 min left"  # never "0 min"


def test_steps_total_is_the_largest_total_seen() -> None:
    assert steps_total(["ninja: Entering", "[1/34] a", "[2/34] b"]) == 34
    assert steps_total(["no status"]) == 0
