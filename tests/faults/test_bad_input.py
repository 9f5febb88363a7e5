"""Every input fault is a usage error (exit 2) that names the flag or variable, the value and what is allowed;
never a traceback, never a build failure. The real CLI entry point (``jitguard.cli.main``) on a real project."""

from __future__ import annotations

from pathlib import Path

import pytest
from fault_projects import write_shared_project

from jitguard.cli import main
from jitguard.config import MAX_JOBS
from jitguard.errors import EXIT_USAGE, ConfigError

HUGE = "9" * 400  # float() of it is infinity: int(float(...)) raised OverflowError


@pytest.fixture
def manifest(tmp_path: Path, cache_dir: Path) -> Path:
    return write_shared_project(tmp_path / "p", delay=0.0).manifest


def _build(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    code = main(["build", *argv])
    return code, capsys.readouterr().err


@pytest.mark.parametrize(
    ("flag", "value", "allowed"),
    [
        ("--memory-budget", HUGE + "G", "at most 1024T"),
        ("--job-memory", HUGE, "at most 1024T"),
        ("--timeout", HUGE, "at most 8784h"),
        ("--stall-timeout", HUGE + "m", "at most 8784h"),
        ("--jobs", "²", f"from 1 to {MAX_JOBS}"),
        ("--jobs", "0", f"from 1 to {MAX_JOBS}"),
        ("--jobs", "100000", f"from 1 to {MAX_JOBS}"),
        ("--jobs", "99999999999999999999", f"from 1 to {MAX_JOBS}"),
    ],
    ids=[
        "huge-budget",
        "huge-job-memory",
        "huge-timeout",
        "huge-stall",
        "superscript-jobs",
        "zero-jobs",
        "huge-jobs",
        "overflow-jobs",
    ],
)
def test_an_out_of_range_flag_is_a_usage_error_naming_the_value_and_the_range(
    manifest: Path, capsys: pytest.CaptureFixture[str], flag: str, value: str, allowed: str
) -> None:
    code, err = _build(capsys, "ninja", str(manifest), flag, value, "--progress", "none")

    assert code == EXIT_USAGE, err
    assert flag in err and value[:20] in err and allowed in err
    assert "Traceback" not in err and len(err) < 600  # a 400-digit value is shown shortened


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("JITGUARD_MEMORY_BUDGET", HUGE),
        ("JITGUARD_JOB_MEMORY", HUGE + "T"),
        ("JITGUARD_BUILD_TIMEOUT", HUGE),
        ("JITGUARD_LOCK_TIMEOUT", HUGE + "h"),
    ],
)
def test_an_out_of_range_setting_is_a_usage_error_naming_the_variable(
    manifest: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    variable: str,
    value: str,
) -> None:
    monkeypatch.setenv(variable, value)

    code, err = _build(capsys, "ninja", str(manifest), "--progress", "none")

    assert code == EXIT_USAGE, err
    assert f"{variable}=" in err and "at most" in err


def test_jobs_for_the_flashinfer_prebuild_are_parsed_the_same_way(
    cache_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, err = _build(capsys, "flashinfer-gdn", "--jobs", "²")

    assert code == EXIT_USAGE, err
    assert "--jobs '²'" in err and f"from 1 to {MAX_JOBS}" in err


def test_a_malformed_max_jobs_reaching_the_flashinfer_hook_is_a_usage_error(
    tmp_path: Path, cache_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from jitguard.flashinfer_jit.flashinfer_build import run_ninja_for_flashinfer

    project = write_shared_project(tmp_path / "p", delay=0.0)
    monkeypatch.setenv("MAX_JOBS", "²")

    with pytest.raises(ConfigError) as raised:
        run_ninja_for_flashinfer(project.root, project.manifest)

    assert raised.value.exit_code == EXIT_USAGE and "MAX_JOBS='²'" in str(raised.value)


@pytest.mark.parametrize("where", ["directory", "proc-file"])
def test_a_log_that_cannot_be_a_log_file_is_a_usage_error(
    manifest: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], where: str
) -> None:
    log = str(tmp_path) if where == "directory" else "/proc/version"

    code, err = _build(capsys, "ninja", str(manifest), "--log", log, "--progress", "none")

    assert code == EXIT_USAGE, err
    assert f"--log {log}" in err and "e.g. --log" in err


def test_a_manifest_syntax_error_is_a_usage_error_at_the_users_file_and_line(
    manifest: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = manifest.read_text().splitlines()
    text.insert(3, "this is not ninja")  # becomes line 4
    manifest.write_text("\n".join(text) + "\n")

    code, err = _build(capsys, "ninja", str(manifest), "--progress", "none")

    assert code == EXIT_USAGE, err
    assert f"{manifest}:4:" in err and "expected 'command =' line" in err
    assert ".ninja:" not in err.replace(f"{manifest}:", "")  # never the wrapped copy's name or line
