"""`jitguard build flashinfer-gdn` with the REAL flashinfer 0.6.6 on this GPU-less host (no libcuda anywhere).

The full GDN build takes about an hour here, so it never runs to the end: doomed, the command stops at
pre-flight; with the fix applied, a 3-second --timeout shows that the build really starts, through jitguard's
runner, and that nothing of it is left running afterwards.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import psutil
import pytest

from envelope_schemas import assert_rejected, assert_valid
from fake_dists import make_dist
from flashinfer_066 import NEEDS_FLASHINFER_066

pytestmark = NEEDS_FLASHINFER_066


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JITGUARD_", "FLASHINFER_", "MAX_JOBS"))}
    env.update({"JITGUARD_CACHE_DIR": str(tmp_path / "cache"), "NO_COLOR": "1", **extra})
    return env


def _jitguard(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "jitguard", *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=180)
    finally:
        # Whatever happens, no compiler of this test outlives it.
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def _can_link_libcuda() -> bool:
    """A real trial link with FlashInfer's -L flags for the CUDA homes this host could resolve."""
    flags = [
        f"-L{home}/{sub}" for home in ("/usr/local/cuda", "/usr/local") for sub in ("lib64", "lib64/stubs")
    ]
    link = subprocess.run(
        ["cc", "-shared", "-x", "c", "/dev/null", "-o", os.devnull, *flags, "-lcuda"], capture_output=True
    )
    return link.returncode == 0


@pytest.mark.skipif(_can_link_libcuda(), reason="this host can link -lcuda; the doomed case needs it missing")
def test_doomed_environment_fails_at_preflight_before_any_compile(tmp_path: Path) -> None:
    workspace = tmp_path / "workspace"
    result = _jitguard(["build", "flashinfer-gdn", "--workspace", str(workspace), "--json"], _env(tmp_path))
    assert result.returncode == 1, result.stderr
    payload: dict[str, Any] = json.loads(result.stdout)
    assert_valid(payload)
    assert payload["schema"] == "jitguard.build.flashinfer-gdn/1"
    assert payload["ok"] is False and payload["module"] == "gdn_prefill_sm90"
    assert "link-missing-libcuda" in [f["code"] for f in payload["findings"]]
    assert (
        payload["detail"]
        == "Build of gdn_prefill_sm90 not started: pre-flight found that it cannot succeed here"
    )
    # Stopped before FlashInfer was even imported: it did not create its workspace.
    assert not workspace.exists()

    assert_rejected({**payload, "findings": []})  # a failure that does not say why
    assert_rejected({**payload, "status": "built"})

    again = _jitguard(["build", "flashinfer-gdn", "--workspace", str(workspace)], _env(tmp_path))
    assert again.returncode == 1
    assert "failure cache" in again.stderr and "link-missing-libcuda" in again.stderr
    assert again.stderr.startswith(
        "Build of gdn_prefill_sm90 not retried: it failed "
    )  # one line, one verdict


@pytest.mark.skipif(_can_link_libcuda(), reason="this host can link -lcuda; the doomed case needs it missing")
def test_a_model_s_partial_module_is_doomed_and_cached_under_its_own_name(tmp_path: Path) -> None:
    """--model: the same pre-flight, for the partial module; the failure cache and the log name the variant set,
    and FlashInfer's full module keeps no record (another user of the workspace building it is not blocked)."""
    config = Path(__file__).parents[2] / "data" / "models" / "qwen3_5" / "config.json"
    workspace = tmp_path / "workspace"
    args = ["build", "flashinfer-gdn", "--model", str(config), "--workspace", str(workspace), "--json"]
    result = _jitguard(args, _env(tmp_path))
    assert result.returncode == 1, result.stderr
    payload: dict[str, Any] = json.loads(result.stdout)
    assert_valid(payload)
    assert payload["module"] == "gdn_prefill_sm90_only_bf16_g1b1a1i1"
    assert "link-missing-libcuda" in [f["code"] for f in payload["findings"]]
    assert not workspace.exists()  # refused before FlashInfer was imported
    from jitguard.state.failure_cache import FailureCache

    assert [r.module for r in FailureCache(tmp_path / "cache").entries()] == [
        "gdn_prefill_sm90_only_bf16_g1b1a1i1"
    ]


def test_a_cutedsl_era_flashinfer_has_nothing_to_build(tmp_path: Path) -> None:
    site = tmp_path / "site"
    make_dist(site, "flashinfer-python", "0.6.14")  # found before the real 0.6.6: its metadata is all we read
    result = _jitguard(["build", "flashinfer-gdn", "--json"], _env(tmp_path, PYTHONPATH=str(site)))
    assert result.returncode == 0, result.stderr
    payload = json.loads(result.stdout)
    assert_valid(payload)
    assert (payload["status"], payload["ok"]) == ("nothing-to-build", True)
    assert "CuTeDSL" in payload["reason"]
    assert_rejected({**payload, "reason": ""})


def test_with_the_fix_the_build_starts_through_the_runner_and_leaves_nothing_behind(tmp_path: Path) -> None:
    stub = tmp_path / "stub"
    stub.mkdir()
    (stub / "stub.c").write_text("int cuInit(unsigned int flags) { (void)flags; return 0; }\n")
    subprocess.run(
        ["cc", "-shared", "-fPIC", "-o", str(stub / "libcuda.so"), str(stub / "stub.c")], check=True
    )
    toolkits = [Path(p) for p in (os.environ.get("CUDA_HOME"), "/usr/local/cuda") if p]
    cuda_home = next((t for t in toolkits if (t / "lib64" / "libcudart.so").exists()), None)
    if cuda_home is None:
        pytest.skip(f"no CUDA toolkit with lib64/libcudart.so among {toolkits}")
    env = _env(tmp_path, FLASHINFER_EXTRA_LDFLAGS=f"-L{stub}", CUDA_HOME=str(cuda_home))
    workspace = tmp_path / "workspace"
    args = [
        "build",
        "flashinfer-gdn",
        "--workspace",
        str(workspace),
        "--jobs",
        "1",
        "--timeout",
        "3",
        "--json",
    ]
    result = _jitguard(args, env)
    assert result.returncode == 1, result.stderr
    payload = json.loads(result.stdout)
    assert_valid(payload)
    assert [f["code"] for f in payload["findings"]] == ["build-timeout"]
    log = Path(payload["log_path"])
    assert log.parent == tmp_path / "cache" / "logs"
    text = log.read_text()
    assert "jitguard: building gdn_prefill_sm90" in text, (
        text
    )  # the supervised runner's log, not FlashInfer's
    assert "nvcc" in text and "gdn_prefill_kernel_" in text  # a real compile had started
    # FlashInfer generated its sources where the serving process will look for them.
    generated = workspace / ".cache" / "flashinfer" / "0.6.6" / "90a" / "generated" / "gdn_prefill_sm90"
    assert len(list(generated.glob("*.cu"))) == 34
    leftovers = [
        p for p in psutil.process_iter(["cmdline"]) if str(workspace) in " ".join(p.info["cmdline"] or [])
    ]
    assert leftovers == []
