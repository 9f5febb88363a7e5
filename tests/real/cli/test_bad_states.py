"""The bad states issue 39 found, each run as a real `jitguard` process: a plain-ASCII terminal, a cache dir
that is a file, no torch, `doctor --deep` and `--engine vllm` saying what they add, `--plan` for a CuTeDSL-era
FlashInfer, and a `file://` URL whose first component is a host name. Each gets a true exit code, no
traceback, and a fix a person can paste."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from envelope_schemas import assert_valid

SRC = Path(__file__).resolve().parents[3] / "src"


def _run(
    tmp_path: Path, *args: str, cwd: Path | None = None, **extra: str
) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JITGUARD_", "FLASHINFER_"))}
    env.update({"JITGUARD_CACHE_DIR": str(tmp_path / "cache"), "NO_COLOR": "1", **extra})
    env["PYTHONPATH"] = os.pathsep.join(p for p in (extra.get("PYTHONPATH"), str(SRC)) if p)
    done = subprocess.run(
        [sys.executable, "-m", "jitguard", *args],
        env=env,
        cwd=cwd or tmp_path,
        capture_output=True,
        text=True,
        errors="replace",
        timeout=300,
        stdin=subprocess.DEVNULL,
    )
    assert "Traceback" not in done.stdout + done.stderr, done.stderr[-3000:]
    return done


def _envelope(done: subprocess.CompletedProcess[str]) -> dict[str, object]:
    payload: dict[str, object] = json.loads(done.stdout)
    assert_valid(payload)
    return payload


@pytest.mark.parametrize("encoding", ["ascii", "latin-1"])
def test_a_terminal_that_cannot_write_unicode_gets_plain_text(tmp_path: Path, encoding: str) -> None:
    env = {"PYTHONIOENCODING": encoding}
    done = subprocess.run(
        [sys.executable, "-m", "jitguard", "doctor", "--backend", "triton"],
        env={**os.environ, **env, "NO_COLOR": "1", "PYTHONPATH": str(SRC)},
        capture_output=True,
        timeout=300,
    )
    assert b"Traceback" not in done.stderr and b"UnicodeEncodeError" not in done.stderr, done.stderr
    assert done.returncode == 1  # triton is blocked here (no GPU)
    assert all(byte < 128 for byte in done.stdout)
    assert re.search(rb"^  x error   gpu-none", done.stdout, re.MULTILINE)


def test_a_cache_dir_that_is_a_file_is_refused_with_what_to_move(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    cache.write_text("not a directory\n")
    listed = _run(tmp_path, "cache", "list")
    assert listed.returncode == 1
    assert f"mv {cache} {cache}.moved && mkdir -p {cache}" in listed.stderr
    error = _envelope(_run(tmp_path, "cache", "clear", "--yes", "--json"))["error"]
    assert isinstance(error, dict) and error["exit_code"] == 1
    assert [f["code"] for f in error["findings"]] == ["cache-dir-unwritable"]

    doctor = _run(tmp_path, "doctor", "--backend", "torch")
    assert f"mv {cache} {cache}.moved && mkdir -p {cache}" in doctor.stdout
    assert f"mkdir -p {cache} && chown" not in doctor.stdout

    under = _run(tmp_path, "doctor", "--backend", "torch", JITGUARD_CACHE_DIR=str(cache / "sub"))
    assert f"mv {cache} {cache}.moved && mkdir -p {cache}/sub" in under.stdout


def test_warm_restore_into_a_cache_under_a_file_says_which_file(tmp_path: Path) -> None:
    store = tmp_path / "store"
    store.mkdir()
    (tmp_path / "cache").write_text("")
    args = ("warm", "restore", "--arch", "9.0", "--store", f"file://{store}", "--layers", "jitguard")
    done = _run(tmp_path, *args)
    assert done.returncode == 1
    assert "FileExistsError" not in done.stderr
    assert f"{tmp_path / 'cache'} is a file" in done.stderr and "mv " in done.stderr
    assert _envelope(_run(tmp_path, *args, "--json"))["schema"] == "jitguard.error/1"


def test_gdn_run_without_torch_says_so_under_json(tmp_path: Path) -> None:
    shadow = tmp_path / "no-torch"
    shadow.mkdir()  # `import torch` fails here as it does where torch is not installed
    (shadow / "torch.py").write_text("raise ModuleNotFoundError(\"No module named 'torch'\", name='torch')\n")
    done = _run(tmp_path, "gdn", "run", "--json", PYTHONPATH=str(shadow))
    assert done.returncode == 1
    error = _envelope(done)["error"]
    assert isinstance(error, dict) and "`pip install torch`" in error["message"]
    assert "pip install torch" in done.stderr


def test_doctor_deep_shows_what_it_imported(tmp_path: Path) -> None:
    text = _run(tmp_path, "doctor", "--backend", "triton", "--deep").stdout
    assert "deep checks" in text and "import fla.ops.gated_delta_rule" in text
    assert "deep checks" not in _run(tmp_path, "doctor", "--backend", "triton").stdout
    payload = _envelope(_run(tmp_path, "doctor", "--backend", "triton", "--deep", "--json"))
    deep = payload["deep"]
    assert isinstance(deep, dict) and deep["triton"]["imports"] == ["fla.ops.gated_delta_rule"]
    assert deep["triton"]["outcome"] in ("ok", "failed")


def test_doctor_engine_vllm_explains_every_code_it_shows(tmp_path: Path) -> None:
    text = _run(tmp_path, "doctor", "--backend", "torch", "--engine", "vllm").stdout
    shown = {c for group in re.findall(r"cannot work here \(([^)]*)\)", text) for c in group.split(", ")}
    assert shown, text  # no GPU here: FlashInfer cannot work
    for code in shown:
        assert re.search(rf"^    \[{re.escape(code)}\] .+\n      fix: ", text, re.MULTILINE), code


def test_a_plan_for_a_cutedsl_era_flashinfer_says_what_to_do(tmp_path: Path) -> None:
    done = _run(tmp_path, "build", "flashinfer-gdn", "--plan", "--flashinfer-version", "0.6.14")
    assert done.returncode == 2
    assert "nothing to prebuild" in done.stderr and "--flashinfer-version 0.6.13" in done.stderr


@pytest.mark.parametrize(
    "args",
    [
        ("warm", "save", "--arch", "9.0", "--layers", "jitguard", "--store", "file://relative/dir"),
        ("build", "ninja", "build.ninja", "--publish", "file://relative/dir"),
    ],
    ids=["warm --store", "build --publish"],
)
def test_a_file_url_with_a_host_is_refused_with_the_absolute_form(tmp_path: Path, args: tuple[str]) -> None:
    done = _run(tmp_path, *args)
    assert done.returncode == 2
    assert "file:///relative/dir" in done.stderr and "host name" in done.stderr
    assert not (tmp_path / "relative").exists()


def test_a_file_url_with_a_host_in_jitguard_share_is_a_config_error(tmp_path: Path) -> None:
    done = _run(tmp_path, "warm", "show", "--arch", "9.0", "--json", JITGUARD_SHARE="file://relative/dir")
    assert done.returncode == 2
    error = _envelope(done)["error"]
    assert isinstance(error, dict) and error["kind"] == "config"
    assert not (tmp_path / "relative").exists()
