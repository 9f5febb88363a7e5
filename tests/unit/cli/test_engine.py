"""`jitguard doctor --engine` rows and text (the flag itself is doctor's): what SGLang's plugin would decide
here, read without importing SGLang."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from jitguard.cli.engine import describe, render
from jitguard.errors import UsageError


def test_sglang_rows_give_each_phase_its_option_and_verdict(tmp_path: Path) -> None:
    rows = describe("sglang", tmp_path)
    assert [r["phase"] for r in rows] == ["prefill", "decode", "verify"]
    for row in rows:
        assert (
            row["option"] == f"--linear-attn-{row['phase']}-backend"
            and row["also"] == "--linear-attn-backend"
        )
        assert row["flashinfer_usable"] is (not row["blocking"])
        if not row["flashinfer_usable"]:
            assert row["primary"]["code"] == row["blocking"][0]
            assert (row["when_sglang_picks_flashinfer"], row["when_named"]) == (
                "triton (one warning)",
                "stop at start-up",
            )
    assert "sglang" not in sys.modules


def test_sglang_text_names_each_phase_and_what_jitguard_does(tmp_path: Path) -> None:
    text = render("sglang", describe("sglang", tmp_path))
    for phase in ("prefill", "decode", "verify"):
        assert f"  {phase} " in text
    assert "asked for by name ->" in text


def test_an_unknown_engine_is_a_usage_error(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="sglang"):
        describe("tgi", tmp_path)
