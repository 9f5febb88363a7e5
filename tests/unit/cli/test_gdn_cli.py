"""`jitguard gdn run` and `jitguard gdn explain`, run as real processes on this GPU-less machine."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("jitguard.findings.checks")


def jitguard(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "JITGUARD_CACHE_DIR": str(tmp_path / "cache")}
    env.pop("JITGUARD_GDN_BACKEND", None)
    return subprocess.run(
        [sys.executable, "-m", "jitguard", *args], capture_output=True, text=True, env=env, timeout=300
    )


def test_run_on_cpu_picks_torch_and_reports_the_error_against_the_reference(tmp_path: Path) -> None:
    done = jitguard(tmp_path, "gdn", "run", "--json", "--repeat", "1")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["schema"] == "jitguard.gdn.run/1"
    assert result["backend"] == "torch" and result["device"] == "cpu" and result["shape"]["name"] == "small"
    assert result["reference"] == "float64 token-by-token recurrence"
    assert 0 < result["error"]["output_rms_rel"] <= 5e-3 and result["ok"] is True
    skipped = {e["backend"]: e for e in result["decision"]["trace"] if e["outcome"] == "skipped"}
    assert set(skipped) == {"flashinfer", "triton"}


def test_run_with_a_named_backend_that_cannot_run_exits_1_with_the_findings(tmp_path: Path) -> None:
    done = jitguard(tmp_path, "gdn", "run", "--backend", "flashinfer", "--repeat", "0")
    assert done.returncode == 1
    assert "[gpu-none]" in done.stderr and "[link-missing-libcuda]" in done.stderr
    assert "Or use backend='torch'" in done.stderr


def test_run_text_output_names_backend_time_and_verdict(tmp_path: Path) -> None:
    done = jitguard(tmp_path, "gdn", "run", "--dtype", "float32", "--repeat", "1")
    assert done.returncode == 0, done.stderr
    for needle in ("backend:    torch", "why not flashinfer", "time:", "verdict:    OK"):
        assert needle in done.stdout


def test_run_on_a_missing_gpu_is_a_usage_error(tmp_path: Path) -> None:
    done = jitguard(tmp_path, "gdn", "run", "--device", "cuda")
    assert done.returncode == 2 and "Use --device cpu" in done.stderr


def test_explain_shows_the_decision_for_a_cuda_call(tmp_path: Path) -> None:
    done = jitguard(tmp_path, "gdn", "explain")
    assert done.returncode == 0, done.stderr
    assert "cuda bfloat16, D=128, heads q/k/v=16/16/32 (gva)" in done.stdout
    assert "[gpu-none]" in done.stdout and "chosen:    torch" in done.stdout
    payload = json.loads(jitguard(tmp_path, "gdn", "explain", "--json").stdout)
    assert payload["auto"]["backend"] == "torch"
    assert payload["statuses"]["flashinfer"]["usable"] is False


def test_run_with_an_unknown_device_is_a_usage_error_not_a_traceback(tmp_path: Path) -> None:
    done = jitguard(tmp_path, "gdn", "run", "--device", "gpu", "--repeat", "0")
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "use cpu, cuda or cuda:N" in done.stderr
