"""`jitguard build flashinfer-gdn`: bad input is a usage error (exit 2) that names the flag, before any work."""

from __future__ import annotations

from pathlib import Path

import pytest

from jitguard.cli import main


@pytest.fixture(autouse=True)
def _isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JITGUARD_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("FLASHINFER_CUDA_ARCH_LIST", raising=False)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--arch", "sm90"], "--arch 'sm90'"),
        (["--arch", "8.0"], "runs only on sm_90a"),
        (["--arch", "10.0a"], "use --arch 9.0a"),
        (["--jobs", "0"], "--jobs '0'"),
        (["--jobs", "many"], "--jobs 'many'"),
        (["--memory-budget", "lots"], "--memory-budget"),
        (["--memory-budget", "150%"], "--memory-budget"),
        (["--timeout", "soon"], "--timeout"),
        (["--timeout", "0"], "--timeout"),
    ],
)
def test_bad_flags_are_usage_errors(
    args: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["build", "flashinfer-gdn", *args]) == 2
    assert message in capsys.readouterr().err


def test_a_workspace_that_is_a_file_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("")
    assert main(["build", "flashinfer-gdn", "--workspace", str(not_a_dir)]) == 2
    assert "not a directory" in capsys.readouterr().err


def test_a_wrong_arch_in_the_environment_is_caught_too(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("FLASHINFER_CUDA_ARCH_LIST", "8.9")
    assert main(["build", "flashinfer-gdn"]) == 2
    assert "sm_90a" in capsys.readouterr().err
