"""Under --json a command that fails before its result prints the `jitguard.error/1` envelope to stdout (never
nothing), still explains itself on stderr, and exits as before: 2 for usage, 1 otherwise."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from envelope_schemas import assert_rejected, assert_valid
from jitguard import __version__
from jitguard.cli import main


@pytest.fixture(autouse=True)
def _isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JITGUARD_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("NO_COLOR", "1")


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, dict[str, Any], str]:
    code = main(argv)
    out, err = capsys.readouterr()
    return code, json.loads(out), err


def test_a_bad_flag_value_prints_a_usage_error_envelope(capsys: pytest.CaptureFixture[str]) -> None:
    code, data, err = run(["doctor", "--json", "--backend", "cuda"], capsys)
    assert code == 2
    assert_valid(data)
    assert data["schema"] == "jitguard.error/1" and data["jitguard"] == __version__
    error = data["error"]
    assert (error["kind"], error["exit_code"], error["findings"]) == ("usage", 2, [])
    assert "invalid choice: 'cuda'" in error["message"] and "jitguard doctor --help" in error["message"]
    assert "invalid choice: 'cuda'" in err and "usage: jitguard doctor" in err


def test_an_unknown_flag_is_an_envelope_even_though_nothing_parsed(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, data, _ = run(["cache", "list", "--json", "--colour"], capsys)
    assert code == 2
    assert_valid(data)
    assert data["error"]["kind"] == "usage" and "--colour" in data["error"]["message"]


def test_a_malformed_jitguard_variable_is_a_config_error_envelope(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    (tmp_path / "build.ninja").write_text("rule noop\n  command = true\nbuild out: noop\n")
    monkeypatch.setenv("JITGUARD_STALL_TIMEOUT", "forever")
    code, data, err = run(["build", "ninja", str(tmp_path), "--json"], capsys)
    assert code == 2
    assert_valid(data)
    assert (data["error"]["kind"], data["error"]["exit_code"]) == ("config", 2)
    assert "JITGUARD_STALL_TIMEOUT='forever'" in data["error"]["message"]
    assert "JITGUARD_STALL_TIMEOUT='forever'" in err


def test_a_usage_error_raised_by_the_command_is_an_envelope(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code, data, _ = run(["build", "ninja", str(tmp_path / "nowhere"), "--json"], capsys)
    assert code == 2
    assert_valid(data)
    assert "no such ninja file" in data["error"]["message"]


def test_without_json_stdout_stays_empty(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["doctor", "--backend", "cuda"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and "invalid choice" in err


def test_the_error_schema_rejects_a_usage_error_that_exits_1(capsys: pytest.CaptureFixture[str]) -> None:
    _, data, _ = run(["doctor", "--json", "--backend", "cuda"], capsys)
    data["error"]["exit_code"] = 1
    assert_rejected(data)


def test_the_error_schema_rejects_an_unknown_kind(capsys: pytest.CaptureFixture[str]) -> None:
    _, data, _ = run(["doctor", "--json", "--backend", "cuda"], capsys)
    data["error"]["kind"] = "oops"
    assert_rejected(data)
