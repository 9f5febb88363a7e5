"""The engine plugins' warm restore: tried once per process and store, whatever came of it (an engine registers
its plugins more than once; a store that failed must not cost its timeout and its warning again)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from jitguard.config import Settings
from jitguard.fleet import warm_start

pytest.importorskip(
    "fsspec", reason="the artifact store needs fsspec (pip install fsspec: the 'share' extra)"
)


def test_a_store_that_is_not_there_is_tried_and_warned_about_once_per_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(warm_start, "_tried", {})
    settings = Settings.from_env(
        {
            "JITGUARD_SHARE": f"file://{tmp_path / 'not-mounted'}",
            "JITGUARD_WARM_ARCH": "9.0",
            "JITGUARD_CACHE_DIR": str(tmp_path / "cache"),
        }
    )
    with caplog.at_level(logging.WARNING, logger="jitguard"):
        first = warm_start.restore_once(settings)
        again = warm_start.restore_once(settings)
    assert first.action == again.action == "failed"
    assert "there is no store at" in first.detail and again.detail.startswith("tried earlier in this process")
    warnings = [r for r in caplog.records if "warm snapshot" in r.getMessage()]
    assert len(warnings) == 1, [r.getMessage() for r in warnings]


def test_no_store_configured_is_skipped_without_asking_for_the_gpu(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(warm_start, "_tried", {})
    monkeypatch.setattr(warm_start, "host_arch", lambda settings: pytest.fail("the GPU was asked for"))
    settings = Settings.from_env({"JITGUARD_CACHE_DIR": str(tmp_path / "cache")})
    assert warm_start.restore_once(settings).action == "skipped"
