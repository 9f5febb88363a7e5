"""A partial GDN prefill module made for real: FlashInfer 0.6.6's generator, jitguard's routed dispatch unit,
FlashInfer's launcher and ninja file, jitguard's supervised build (nvcc 13.0, a real link stub for libcuda), the
symbol check and a real load; only the instance translation unit is a stand-in (tests/real/
gdn_variant_scenarios.py says how), so the build takes ~2 min here instead of ~5.

Each scenario runs in a fresh process (FlashInfer fixes its workspace at import); they share one workspace, in
order: build, then load it as a prebuilt module, then break it.
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

SCENARIOS = Path(__file__).with_name("gdn_variant_scenarios.py")
MODULE = "gdn_prefill_sm90_only_bf16_g1b1a1i1"

pytestmark = NEEDS_FLASHINFER_066


def _run(scenario: str, env: dict[str, str]) -> dict[str, Any]:
    proc = subprocess.run(
        [sys.executable, str(SCENARIOS), scenario], env=env, capture_output=True, text=True, timeout=900
    )
    assert proc.returncode == 0, f"scenario {scenario} crashed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    result["_stderr"] = proc.stderr
    return result


@pytest.fixture(scope="module")
def env(
    tmp_path_factory: pytest.TempPathFactory, stub_libcuda_builder: Callable[..., Path]
) -> dict[str, str]:
    root = tmp_path_factory.mktemp("variants")
    stub = stub_libcuda_builder(root / "stub")
    toolkits = [
        Path(p) for p in (os.environ.get("CUDA_HOME"), "/usr/local/cuda-13.0", "/usr/local/cuda") if p
    ]
    cuda_home = next((t for t in toolkits if (t / "lib64" / "libcudart.so").exists()), None)
    if cuda_home is None:
        pytest.skip(f"no CUDA toolkit with lib64/libcudart.so among {toolkits}")
    clean = {
        k: v for k, v in os.environ.items() if not k.startswith(("JITGUARD_", "FLASHINFER_", "MAX_JOBS"))
    }
    return {
        **clean,
        "FLASHINFER_CUDA_ARCH_LIST": "9.0a",
        "FLASHINFER_WORKSPACE_BASE": str(root / "workspace"),
        "FLASHINFER_EXTRA_LDFLAGS": f"-L{stub}",
        "CUDA_HOME": str(cuda_home),
        "JITGUARD_CACHE_DIR": str(root / "cache"),
        "JITGUARD_LOCK_TIMEOUT": "900",
    }


@pytest.fixture(scope="module")
def built(env: dict[str, str]) -> dict[str, Any]:
    return _run("build", env)


@pytest.fixture(scope="module")
def prebuilt(built: dict[str, Any], env: dict[str, str]) -> dict[str, Any]:
    return _run("prebuilt", {**env, "FLASHINFER_DISABLE_JIT": "1"})


@pytest.fixture(scope="module")
def broken(prebuilt: dict[str, Any], env: dict[str, str]) -> dict[str, Any]:
    return _run("broken", env)


def test_the_plan_is_flashinfers_own_grid_and_the_partial_module_takes_three_of_its_files(
    built: dict[str, Any],
) -> None:
    assert built["flashinfer_generated"] == built["full_plan_sources"]  # jitguard's grid = FlashInfer's 34
    assert built["module"] == MODULE
    assert built["sources"] == [
        f"{MODULE}/gdn_prefill_kernel_bf16_g1b1a1i1.cu",
        f"{MODULE}/gdn_prefill_launcher.cu",
        f"{MODULE}/prefill_kernel_delta_rule_sm90.cu",
    ]
    assert built["same_instance"] and built["same_launcher"] and built["routed_dispatch"]
    assert built["flags_as_flashinfers"]


def test_flashinfer_writes_the_ninja_file_of_the_partial_module_under_its_own_name(
    built: dict[str, Any],
) -> None:
    assert built["ninja_compiles"] == [
        "gdn_prefill_kernel_bf16_g1b1a1i1",
        "gdn_prefill_launcher",
        "prefill_kernel_delta_rule_sm90",
    ]
    assert built["ninja_links"] == [f"{MODULE}.so"]


def test_the_variant_set_is_in_the_lock_the_manifest_and_the_failure_cache(built: dict[str, Any]) -> None:
    assert Path(built["lock_path"]).name == f"{MODULE}.lock"
    manifest = built["manifest"]
    assert manifest["schema"] == "jitguard.gdn-variants/1" and manifest["module"] == MODULE
    assert [v["name"] for v in manifest["variants"]] == ["bf16_g1b1a1i1"] and manifest["partial"] is True
    assert built["cache"] == [[MODULE, "success"]]


def test_the_supervised_build_links_a_library_that_needs_no_missing_instance_and_loads(
    built: dict[str, Any],
) -> None:
    assert built["status"] == "built" and built["log_steps"] == [["4", "4"]]
    assert built["symbols"]["undefined"] == []
    assert len(built["symbols"]["defined"]) == 1 and "Lb1ELb1ELb1ELb1E" in built["symbols"]["defined"][0]
    assert built["loaded"] == "Module"
    # The call reached FlashInfer's real launcher in the loaded library (which refuses CPU tensors here).
    assert "output must be a CUDA tensor" in built["call"]
    assert built["full_so"] is False  # the full module was never built, nor named
    assert built["again"] == "up-to-date"


def test_a_prebuilt_partial_module_serves_with_flashinfer_jit_disabled(prebuilt: dict[str, Any]) -> None:
    assert prebuilt["routed"] and prebuilt["router"] and prebuilt["same_namespace"]
    assert prebuilt["modules"] == {MODULE: ["bf16_g1b1a1i1"]}
    assert "output must be a CUDA tensor" in prebuilt["call"]
    assert prebuilt["full_so"] is False


def test_a_partial_module_that_does_not_compile_is_recorded_under_its_own_name(
    broken: dict[str, Any],
) -> None:
    first = broken["first"]
    assert first["type"] == "BuildFailed" and first["module"] == MODULE and first["codes"] == ["build-failed"]
    assert first["falls_back_to_full"] is True  # the router would take FlashInfer's full module
    assert broken["cache"] == [[MODULE, "failure"]]


@pytest.mark.parametrize(
    ("extra", "routed"),
    [({}, True), ({"JITGUARD_GDN_VARIANTS": "all"}, False), ({"JITGUARD_DISABLE": "1"}, False)],
    ids=["default", "variants-all", "disabled"],
)
def test_importing_flashinfer_routes_its_gdn_module_unless_told_not_to(
    env: dict[str, str], extra: dict[str, str], routed: bool
) -> None:
    result = _run("settings", {**env, **extra})
    assert result["routed"] is routed
    assert result["cache_clear"] is True
