"""Reading ninja's progress and saying it."""

from __future__ import annotations

import logging

import pytest

from jitguard.supervise.progress import BuildProgress, LogReporter, make_reporter, parse_status


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
