"""docs/failsafe.md through the REAL vLLM code: jitguard broken on purpose (a dependency missing, a probe that
raises or hangs) never raises into vLLM, never logs a false "passed", and says so once."""

from __future__ import annotations

from typing import Any

import pytest

pytestmark = pytest.mark.slow

CUDA_TORCH = "2.11.0+cu130"
PASSED = "passed pre-flight"


def warnings(output: str, needle: str) -> list[str]:
    return [line for line in output.splitlines() if needle in line]


def test_without_pyelftools_a_doomed_flashinfer_still_falls_back_once(release: Any, situations: Any) -> None:
    spec = {"requests": ["auto", "auto"], "layers": 2, "torch_build": CUDA_TORCH, "block": ["elftools"]}
    host = situations.doom(release)  # what dooms FlashInfer in the release's era (conftest.Situations.doom)
    result, output = host.release.run(spec, host.env)
    assert result["registered"] and result["hooked"]
    for run in result["runs"]:
        assert run["error"] is None, run["error"]
        assert run["layers"] == ["triton", "triton"]
    assert host.code in result["status"]["blocking"]
    assert len(warnings(output, "jitguard: vLLM chose FlashInfer GDN prefill")) == 1
    assert PASSED not in output


def test_without_pyelftools_a_workable_flashinfer_is_kept_but_not_called_passed(
    release: Any, situations: Any
) -> None:
    spec = {"requests": ["auto", "flashinfer"], "layers": 1, "torch_build": CUDA_TORCH, "block": ["elftools"]}
    """nvcc era: pyelftools reads the built module's ELF, so without it the verdict is "could not verify" (one
    warning) and vLLM's choice stands. CuTeDSL era: nothing is linked or loaded from disk, so the verdict does
    not need pyelftools: no such warning, and FlashInfer is kept."""
    result, output = release.run(spec, situations.hopper(libcuda=True))
    for run in result["runs"]:
        assert run["error"] is None, run["error"]
        assert run["layers"] == ["flashinfer"]
    unverified = warnings(output, "could not verify FlashInfer GDN prefill")
    if release.era == "cutedsl":
        assert unverified == []
        return
    assert PASSED not in output
    assert len(unverified) == 1


@pytest.mark.parametrize("mode", ["raise", "hang"])
def test_a_broken_probe_leaves_vllms_choice_with_at_most_one_warning(
    release: Any, situations: Any, mode: str
) -> None:
    spec: dict[str, Any] = {"requests": ["auto", "flashinfer"], "layers": 2, "inject": ["gpu", mode]}
    if mode == "raise":  # the H200 host's CUDA torch; a hanging probe must run the plugin's own collection
        spec["torch_build"] = CUDA_TORCH
    env = situations.hopper(libcuda=True)
    env["JITGUARD_PREFLIGHT_TIMEOUT"] = "3s"
    result, output = release.run(spec, env)
    for run in result["runs"]:
        assert run["error"] is None, run["error"]
        # raise: the GPU fact is unknown, nothing else is against FlashInfer; hang: no status at all. Either
        # way nothing proves FlashInfer doomed, so vLLM's own choice stands in every layer.
        assert run["layers"] == ["flashinfer", "flashinfer"]
    assert PASSED not in output
    if mode == "raise":
        assert "fact-unavailable" in result["status"]["codes"]
        assert len(warnings(output, "could not verify FlashInfer GDN prefill")) == 1
    else:
        assert len(warnings(output, "[jitguard-fault]")) == 1
