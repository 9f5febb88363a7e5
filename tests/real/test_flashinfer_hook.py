"""The FlashInfer hook with the REAL installed flashinfer (0.6.6), real nvcc, real linker, on this GPU-less host.

Never compiles the GDN module itself (34 TUs, ~1 h here): on this machine it fails pre-flight (no libcuda), and
with a link stub only its pre-flight is checked. The end-to-end hooked build runs on a one-kernel module made
with FlashInfer's own ``gen_jit_spec``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from flashinfer_066 import NEEDS_FLASHINFER_066
from jitguard.state.failure_cache import FailureCache

SCENARIOS = Path(__file__).with_name("flashinfer_hook_scenarios.py")

pytestmark = NEEDS_FLASHINFER_066


def _env(root: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JITGUARD_", "FLASHINFER_", "MAX_JOBS"))}
    env.update(
        {
            "FLASHINFER_CUDA_ARCH_LIST": "9.0a",
            "FLASHINFER_WORKSPACE_BASE": str(root / "workspace"),
            "JITGUARD_CACHE_DIR": str(root / "cache"),
            "JITGUARD_LOCK_TIMEOUT": "300",
        }
    )
    env.update(extra)
    return env


def _run(scenario: str, env: dict[str, str], *args: str) -> dict[str, Any]:
    proc = subprocess.run(
        [sys.executable, str(SCENARIOS), scenario, *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, f"scenario {scenario} crashed:\n{proc.stdout}\n{proc.stderr}"
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    result["_stderr"] = proc.stderr
    return result


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("hook")


@pytest.fixture(scope="module")
def doomed(root: Path) -> dict[str, Any]:
    """The GDN module on this machine as it is (no libcuda anywhere), through the hook, twice."""
    env = _env(root)
    env.pop("CUDA_HOME", None)
    return _run("gdn-preflight", env)


def test_gdn_module_fails_preflight_with_the_libcuda_finding_instead_of_compiling(
    doomed: dict[str, Any],
) -> None:
    first = doomed["first"]
    assert first["type"] == "BuildFailed"
    assert "link-missing-libcuda" in first["codes"]
    assert "pre-flight" in first["message"]
    # Nothing compiled: no object, no ninja log, no library.
    assert doomed["objects"] == []
    assert doomed["ninja_log"] is False
    assert doomed["so"] is False


def test_second_attempt_is_answered_by_the_failure_cache(doomed: dict[str, Any], root: Path) -> None:
    second = doomed["second"]
    assert second["type"] == "CachedBuildFailure"
    assert second["codes"] == doomed["first"]["codes"]
    assert "jitguard cache clear --module gdn_prefill_sm90" in second["message"]
    (record,) = FailureCache(root / "cache").entries()
    assert (record.module, record.outcome) == ("gdn_prefill_sm90", "failure")
    assert "link-missing-libcuda" in record.codes


def test_install_is_lazy_and_idempotent(doomed: dict[str, Any]) -> None:
    assert doomed["install"] is True
    assert doomed["flashinfer_imported_by_install"] is False
    assert doomed["install_again"] is True
    assert doomed["install_after_import"] is True
    for state in (doomed["patched"], doomed["patched_after_reinstall"]):
        assert state == {
            "build_and_load": True,
            "wrapped_once": True,
            "core_run_ninja": True,
            "cpp_ext_run_ninja": True,
        }


def test_install_after_flashinfer_was_imported_patches_at_once_and_uninstall_restores(root: Path) -> None:
    result = _run("eager-install", _env(root))
    assert result["install"] is True and result["install_again"] is True
    assert result["patched"]["build_and_load"] and result["patched_again"]["wrapped_once"]
    assert result["restored"] is True


def test_jitguard_disable_leaves_flashinfer_stock(root: Path) -> None:
    result = _run("disabled", _env(root, JITGUARD_DISABLE="1"))
    assert result["install"] is False
    assert result["finder_installed"] is False
    assert result["active"] is False
    assert not any(result["patched"].values())


@pytest.fixture(scope="module")
def stubbed(
    root: Path,
    doomed: dict[str, Any],
    tmp_path_factory: pytest.TempPathFactory,
    stub_libcuda_builder: Callable[..., Path],
) -> dict[str, Any]:
    """The fix applied: a real link stub for libcuda on FLASHINFER_EXTRA_LDFLAGS, CUDA_HOME naming the toolkit."""
    work = stub_libcuda_builder(tmp_path_factory.mktemp("stub"))
    tiny = work / "tiny.cu"
    tiny.write_text("__global__ void jitguard_tiny(float* x) { x[threadIdx.x] += 1.0f; }\n")
    bad = work / "bad.cu"
    bad.write_text("__global__ void jitguard_bad(float* x) { x[threadIdx.x] += 1.0f }\n")  # missing ';'
    toolkits = [Path(p) for p in (os.environ.get("CUDA_HOME"), "/usr/local/cuda") if p]
    cuda_home = next((t for t in toolkits if (t / "lib64" / "libcudart.so").exists()), None)
    if cuda_home is None:
        pytest.skip(f"no CUDA toolkit with lib64/libcudart.so among {toolkits}")
    env = _env(root, FLASHINFER_EXTRA_LDFLAGS=f"-L{work}", CUDA_HOME=str(cuda_home))
    return _run("stub-libcuda", env, str(tiny), str(bad))


def test_with_the_fix_the_gdn_preflight_passes_and_the_old_failure_no_longer_applies(
    stubbed: dict[str, Any], doomed: dict[str, Any]
) -> None:
    assert stubbed["gdn_preflight"]["passed"] is True, stubbed["gdn_preflight"]


def test_hooked_build_and_load_builds_through_the_runner_checks_and_loads(
    stubbed: dict[str, Any], root: Path
) -> None:
    assert stubbed["tiny_loaded"] == "Module"
    assert stubbed["tiny_outcome"] == "success"
    assert stubbed["tiny_again"] == {"status": "up-to-date", "loaded": "Module"}
    assert stubbed["sidecars"] == [], "the lock holder must remove its sidecar"
    logs = [p.read_text() for p in (root / "cache" / "logs").glob("jitguard_test_tiny-*.log")]
    assert any("[2/2]" in text and "jitguard.supervise.launcher" in text for text in logs), logs


def test_the_start_ledger_counts_the_build_and_the_up_to_date_load(stubbed: dict[str, Any]) -> None:
    ledger = stubbed["ledger"]
    assert (ledger["compiled"], ledger["cached"], ledger["restored"]) == (1, 1, 0)
    assert ledger["examples"] == ["jitguard_test_tiny"]


def test_flashinfer_own_build_path_runs_ninja_through_the_runner(stubbed: dict[str, Any]) -> None:
    assert stubbed["direct_so"] is True
    assert stubbed["direct_logs"] == 1


def test_a_real_compile_error_is_classified_cached_and_retried_once_the_source_changes(
    stubbed: dict[str, Any],
) -> None:
    first, second = stubbed["bad_first"], stubbed["bad_second"]
    assert first["type"] == "BuildFailed" and first["codes"]
    assert first["log_path"] and "bad.cu" in Path(first["log_path"]).read_text()
    assert second["type"] == "CachedBuildFailure" and second["codes"] == first["codes"]
    assert stubbed["bad_fixed"] == {"type": None}


def test_a_fault_inside_the_hook_takes_flashinfers_own_path_with_one_warning(
    root: Path, tmp_path_factory: pytest.TempPathFactory, stub_libcuda_builder: Callable[..., Path]
) -> None:
    """docs/failsafe.md: a jitguard bug or a malformed setting inside build_and_load never reaches FlashInfer's
    caller; FlashInfer builds and loads the module itself, as without jitguard."""
    work = stub_libcuda_builder(tmp_path_factory.mktemp("fault"))
    tiny = work / "tiny.cu"
    tiny.write_text("__global__ void jitguard_tiny(float* x) { x[threadIdx.x] += 1.0f; }\n")
    toolkits = [Path(p) for p in (os.environ.get("CUDA_HOME"), "/usr/local/cuda") if p]
    cuda_home = next((t for t in toolkits if (t / "lib64" / "libcudart.so").exists()), None)
    if cuda_home is None:
        pytest.skip(f"no CUDA toolkit with lib64/libcudart.so among {toolkits}")
    env = _env(root, FLASHINFER_EXTRA_LDFLAGS=f"-L{work}", CUDA_HOME=str(cuda_home))
    out = _run("fault-in-hook", env, str(tiny))
    for case in ("injected", "malformed-setting"):
        assert out[case] == {"loaded": "Module", "so": True, "again": "Module"}, out[case]
    faults = [w for w in out["warnings"] if "[jitguard-fault]" in w]
    # One warning per place and kind of fault, not one per call: the injected bug in build_and_load, then the
    # malformed setting in build_and_load and in the ninja hook FlashInfer's own build went through.
    assert len(faults) == 3, out["warnings"]
    assert "injected bug" in faults[0] and "build hook" in faults[0]
    assert all("JITGUARD_MEMORY_BUDGET" in f for f in faults[1:]) and "ninja hook" in faults[2]
