"""The runner learns how long a module's build takes here, says how long is left, and warns at the start when
the build is foreseen to outlast vLLM's wait for its engine (real ninja, real stand-in compile steps)."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import pytest
from ninja_projects import write_project

from jitguard.decision.engine_wait import VLLM_READY_TIMEOUT_ENV
from jitguard.state.build_durations import BuildDurationStore
from jitguard.supervise.runner import BuildOptions, run_ninja

MODULE = "standins_timed"


def _progress_lines(caplog: pytest.LogCaptureFixture, steps: str) -> list[str]:
    return [
        r.getMessage() for r in caplog.records if r.getMessage().startswith(f"building {MODULE}: {steps}")
    ]


def test_the_second_build_foresees_its_time_from_the_first(
    tmp_path: Path, cache_dir: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(VLLM_READY_TIMEOUT_ENV, raising=False)
    options = BuildOptions(jobs=1, progress="log", progress_interval=0, cache_dir=cache_dir)
    project = write_project(tmp_path / "first", jobs=4, mib=8, seconds=1)
    assert BuildDurationStore(cache_dir).read(MODULE) is None

    with caplog.at_level(logging.INFO, logger="jitguard"):
        first = run_ninja(project.root, project.manifest, module=MODULE, options=options)
    learned = BuildDurationStore(cache_dir).read(MODULE)
    assert learned is not None
    assert (learned.steps, learned.jobs) == (4, 1)
    assert learned.wall_s == pytest.approx(first.wall_s, abs=0.01)
    # Nothing learned and one step done: no number yet.
    assert _progress_lines(caplog, "1/4 steps")
    assert not any("left" in line for line in _progress_lines(caplog, "1/4 steps"))
    assert "VLLM_ENGINE_READY_TIMEOUT_S" not in caplog.text  # no engine waits: nothing to warn about

    # The same module again, from scratch, with vLLM waiting 1 s for its engine.
    caplog.clear()
    shutil.rmtree(project.root)
    project = write_project(tmp_path / "second", jobs=4, mib=8, seconds=1)
    monkeypatch.setenv(VLLM_READY_TIMEOUT_ENV, "1")
    second_log = tmp_path / "second.log"
    with caplog.at_level(logging.INFO, logger="jitguard"):
        run_ninja(project.root, project.manifest, module=MODULE, options=options, log_path=second_log)

    one_done = _progress_lines(caplog, "1/4 steps")
    assert one_done and all("min left" in line for line in one_done), one_done
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any(
        f"longer than vLLM waits for its engine to be ready ({VLLM_READY_TIMEOUT_ENV}=1 s)" in w
        for w in warnings
    ), warnings
    assert any(f"export {VLLM_READY_TIMEOUT_ENV}=" in w for w in warnings)
    text = second_log.read_text()
    assert "expected to take about" in text and f"{VLLM_READY_TIMEOUT_ENV}=1 s" in text
