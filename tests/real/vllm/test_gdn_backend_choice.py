"""The plugin against the REAL code of released vLLM versions, each with the FlashInfer it pins: every GDN layer
layout (by default 0.21.0: spring 2026, ``mamba/gdn_linear_attn.py``; 0.24.0 to 0.33.0: current,
``mamba/gdn/qwen_gdn_linear_attn.py``; any other release with JITGUARD_VLLM_VERSIONS, e.g. 0.18.1 for
``models/qwen3_next.py``) and both FlashInfer eras (0.21.0 and 0.24.0 pin an nvcc-built GDN prefill, 0.26.0
and later a CuTeDSL one): what dooms FlashInfer, and so what jitguard must say, follows the era.

Each module-scoped fixture is one engine start: vLLM's own ``load_general_plugins()`` registers jitguard, the
layer module is imported (and patched on import), and real ``ChunkGatedDeltaRule`` ops (one per GDN layer)
are built under a real ``VllmConfig`` for each ``--gdn-prefill-backend`` value. Only the GPU is a stand-in
(see scenario.py); the facts behind each verdict come from jitguard's real probes of the situation.
"""

from __future__ import annotations

from typing import Any

import pytest

pytestmark = pytest.mark.slow

# The H200 host's torch: the one fact this GPU-less machine cannot make real (its torch may be the CPU build).
CUDA_TORCH = "2.11.0+cu130"
FALLBACK = "jitguard: vLLM chose FlashInfer GDN prefill"


def fallback_warnings(output: str) -> list[str]:
    return [line for line in output.splitlines() if FALLBACK in line]


def run_for(result: dict[str, Any], requested: str) -> dict[str, Any]:
    return next(r for r in result["runs"] if r["requested"] == requested)


def minor(release: Any) -> int:
    return int(release.minor)


def assert_hooked(result: dict[str, Any], release: Any) -> None:
    expected = "model-file" if minor(release) < 19 else "spring-2026" if minor(release) < 22 else "current"
    assert result["vllm"] == release.version
    assert result["layout"] == expected
    assert result["registered"] and result["hooked"]


# ---- FlashInfer workable --------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def workable(release: Any, situations: Any) -> tuple[dict[str, Any], str]:
    spec = {"requests": ["auto", "flashinfer"], "layers": 2, "torch_build": CUDA_TORCH, "build_hook": True}
    return release.run(spec, situations.hopper(libcuda=True))


def test_workable_flashinfer_keeps_vllms_choice(workable: tuple[dict[str, Any], str], release: Any) -> None:
    result, output = workable
    assert_hooked(result, release)
    assert result["status"]["usable"], result["status"]
    for requested in ("auto", "flashinfer"):
        run = run_for(result, requested)
        assert run["error"] is None, run["error"]
        assert run["layers"] == ["flashinfer", "flashinfer"]
        if result["layout"] == "current":
            assert run["resolver"] == run["vllm_choice"] == [requested, "flashinfer"]
    assert fallback_warnings(output) == []


def test_flashinfer_builds_in_the_engine_are_supervised(workable: tuple[dict[str, Any], str]) -> None:
    result, _ = workable
    assert result["build_hook_active"]  # jitguard.install() applied by the plugin


# ---- FlashInfer doomed in its era: no libcuda (nvcc), a damaged nvidia-cutlass-dsl (CuTeDSL) -------------
@pytest.fixture(scope="module")
def doomed(release: Any, situations: Any) -> tuple[dict[str, Any], str, str]:
    spec = {"requests": ["triton", "auto", "flashinfer"], "layers": 3, "torch_build": CUDA_TORCH}
    host = situations.doom(release)
    return (*host.release.run(spec, host.env), host.code)


def test_doomed_status_names_the_eras_one_reason(doomed: tuple[dict[str, Any], str, str]) -> None:
    result, _, code = doomed
    assert not result["status"]["usable"]
    # The H200 stand-in and libcudart were seen: the missing libcuda (nvcc era) or the DSL file that is not its
    # wheel's (CuTeDSL era) is the one reason.
    assert result["status"]["blocking"] == [code]


def test_explicit_triton_is_untouched_and_never_asks(
    doomed: tuple[dict[str, Any], str, str], release: Any
) -> None:
    result, _, _ = doomed
    assert_hooked(result, release)
    run = run_for(result, "triton")
    assert run["error"] is None
    assert run["layers"] == ["triton"] * 3
    if minor(release) >= 18:  # vLLM 0.17 has no --gdn-prefill-backend: it picks FlashInfer on SM90 regardless
        assert run["status_calls"] == 0
    if result["layout"] == "current":
        assert run["resolver"] == run["vllm_choice"] == ["triton", "triton"]


def test_auto_falls_back_to_triton_with_one_warning(doomed: tuple[dict[str, Any], str, str]) -> None:
    result, output, code = doomed
    run = run_for(result, "auto")
    assert run["error"] is None
    assert run["layers"] == ["triton"] * 3
    assert run["status_calls"] == 1  # asked once for the whole process
    if result["layout"] == "current":
        assert run["vllm_choice"] == ["auto", "flashinfer"]  # vLLM alone would have built FlashInfer
        assert run["resolver"] == ["auto", "triton"]
    warnings = fallback_warnings(output)
    assert len(warnings) == 1, output[-4000:]
    assert f"[{code}]" in warnings[0]
    assert "Fix:" in warnings[0] and "Triton" in warnings[0]


def test_explicit_flashinfer_fails_at_engine_init(doomed: tuple[dict[str, Any], str, str]) -> None:
    result, _, code = doomed
    run = run_for(result, "flashinfer")
    assert run["layers"] == []  # the first GDN layer refused to be built
    error = run["error"]
    assert error is not None and "BackendUnavailable" in error["bases"]
    assert code in error["codes"]
    assert "--gdn-prefill-backend triton" in error["message"]
    if result["layout"] == "current":
        assert run["vllm_choice"] == ["flashinfer", "flashinfer"]


# ---- CuTeDSL era: the DSL installed, its packages off the path (pip --target skips its .pth) -------------
# On the H100 this was "passed pre-flight", ready, then NotImplementedError('SM90 GDN prefill DSL kernel is
# unavailable') at the first request. Run with a venv that has no DSL of its own (its .pth would rescue it).
@pytest.fixture(scope="module")
def off_path(release: Any, situations: Any, python_without_the_dsl: Any) -> tuple[dict[str, Any], str, Any]:
    if release.era != "cutedsl":
        pytest.skip(f"vLLM {release.version} pins an nvcc-era FlashInfer: nothing imports the DSL")
    spec = {"requests": ["triton", "auto", "flashinfer"], "layers": 3, "torch_build": CUDA_TORCH}
    env = situations.hopper(libcuda=True)
    result, output = release.without_dsl_path().run(spec, env, python=python_without_the_dsl)
    return result, output, release


def test_dsl_off_the_path_is_the_one_reason(off_path: tuple[dict[str, Any], str, Any]) -> None:
    result, _, _ = off_path
    assert not result["status"]["usable"]
    assert result["status"]["blocking"] == ["cutlass-dsl-off-path"]


def test_dsl_off_the_path_sends_auto_to_triton_with_one_warning_and_the_fix(
    off_path: tuple[dict[str, Any], str, Any],
) -> None:
    result, output, release = off_path
    run = run_for(result, "auto")
    assert run["error"] is None
    assert run["layers"] == ["triton"] * 3
    assert run["vllm_choice"] == ["auto", "flashinfer"]  # stock vLLM: ready, then dead at the first request
    assert run["resolver"] == ["auto", "triton"]
    [warning] = fallback_warnings(output)
    assert "[cutlass-dsl-off-path]" in warning
    [packages] = release.dsl_packages
    assert f"export PYTHONPATH={packages}" in warning


def test_dsl_off_the_path_refuses_explicit_flashinfer_at_init_with_the_fix(
    off_path: tuple[dict[str, Any], str, Any],
) -> None:
    result, _, release = off_path
    run = run_for(result, "flashinfer")
    assert run["layers"] == []
    error = run["error"]
    assert error is not None and "BackendUnavailable" in error["bases"]
    assert error["codes"] == ["cutlass-dsl-off-path"]
    [packages] = release.dsl_packages
    assert f"export PYTHONPATH={packages}" in error["message"]
    assert "--gdn-prefill-backend triton" in error["message"]


# ---- a failure recorded in jitguard's failure cache -----------------------------------------------------
@pytest.fixture(scope="module")
def cached_failure(release: Any, situations: Any) -> tuple[dict[str, Any], str]:
    spec = {"requests": ["auto", "flashinfer"], "torch_build": CUDA_TORCH, "failure": "build-oom-killed"}
    return release.run(spec, situations.hopper(libcuda=True))


def test_cached_failure_sends_auto_to_triton(cached_failure: tuple[dict[str, Any], str]) -> None:
    result, output = cached_failure
    # Pre-flight alone passes in this situation (the workable test): the cache entry is the only reason.
    assert result["status"]["blocking"] == ["gdn-cached-failure"]
    assert run_for(result, "auto")["layers"] == ["triton"]
    warnings = fallback_warnings(output)
    assert len(warnings) == 1 and "[gdn-cached-failure]" in warnings[0]


def test_cached_failure_refuses_explicit_flashinfer(cached_failure: tuple[dict[str, Any], str]) -> None:
    result, _ = cached_failure
    error = run_for(result, "flashinfer")["error"]
    assert error is not None and "gdn-cached-failure" in error["codes"]


# ---- this machine as it is, through the plugin's default status (what ships) ----------------------------
@pytest.fixture(scope="module")
def this_machine(release: Any, situations: Any) -> tuple[dict[str, Any], str]:
    return release.run({"requests": ["auto", "flashinfer"]}, situations.machine())


def test_this_gpu_less_machine_gets_triton_from_real_facts(
    this_machine: tuple[dict[str, Any], str], release: Any
) -> None:
    result, output = this_machine
    assert "gpu-none" in result["status"]["blocking"]
    # No libcuda here either: a reason more for the nvcc-built module only (the CuTeDSL era links nothing).
    assert ("link-missing-libcuda" in result["status"]["codes"]) == (release.era == "nvcc")
    assert run_for(result, "auto")["layers"] == ["triton"]
    assert "BackendUnavailable" in run_for(result, "flashinfer")["error"]["bases"]
    assert len(fallback_warnings(output)) == 1


# ---- JITGUARD_DISABLE=1 ---------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def disabled(release: Any, situations: Any) -> tuple[dict[str, Any], str]:
    spec = {"requests": ["auto", "flashinfer"], "build_hook": True}
    return release.run(spec, situations.machine(JITGUARD_DISABLE="1"))


def test_disable_leaves_vllm_stock(disabled: tuple[dict[str, Any], str]) -> None:
    result, output = disabled
    assert not result["registered"] and not result["hooked"]
    assert not result["build_hook_active"]
    assert result["status_calls"] == 0
    for requested in ("auto", "flashinfer"):
        run = run_for(result, requested)
        assert run["error"] is None
        assert run["layers"] == ["flashinfer"]  # vLLM's own choice on an SM90 platform, even though doomed
    assert "jitguard" not in output


# ---- vLLM's own GDN prefill warmup as evidence (0.18+), jitguard's proof call where it has none (0.17) -------
# Pre-flight passes (an H200 host as the facts see it), and FlashInfer's real GDN prefill call then fails in
# vLLM's warmup (no GPU here): a cause jitguard's verdict did not foresee. vLLM alone logs a warning and
# reports ready; jitguard moves the layers to Triton/FLA first (auto) or stops the start (named), and records
# the failure so the next start decides in the pre-flight. 0.17 makes no warmup call: jitguard's own proof
# call in the profile run fails the same way, under its own code.
FAILED = "jitguard: FlashInfer GDN prefill failed on first use: [{code}]"


def evidence(release: Any) -> str:
    """The code of the failed call: vLLM's own warmup (0.18+), or jitguard's proof (0.17)."""
    return "engine-proof-failed" if minor(release) < 18 else "engine-warmup-failed"


@pytest.fixture(scope="module")
def warmup(release: Any, situations: Any) -> tuple[dict[str, Any], str, dict[str, Any], str]:
    env = situations.hopper(libcuda=True)
    if release.era == "nvcc":
        # Where FlashInfer builds its GDN module before it looks at the device (0.17's), the call must fail
        # at once, not after minutes of compiling: the real nvcc, given a flag it rejects, as a broken
        # toolkit would (pre-flight has no way to foresee it).
        env["FLASHINFER_EXTRA_CUDAFLAGS"] = "--jitguard-test-no-such-nvcc-flag"
    spec = {"requests": ["auto", "flashinfer"], "layers": 3, "torch_build": CUDA_TORCH, "warmup": True}
    first, first_output = release.run(spec, env)
    again = {"requests": ["auto", "flashinfer"], "layers": 2, "torch_build": CUDA_TORCH, "warmup": True}
    second, second_output = release.run(again, env)  # the next start, same host, same caches
    return first, first_output, second, second_output


def test_a_failed_warmup_moves_auto_to_triton_before_ready(warmup: Any, release: Any) -> None:
    result, output, _, _ = warmup
    run = run_for(result, "auto")
    assert run["layers"] == ["flashinfer"] * 3  # pre-flight passed: vLLM's choice stood at init
    assert run["error"] is None
    assert run["warmed"] == ["triton"] * 3  # the first layer's warmup failed; every layer moved
    warnings = [line for line in output.splitlines() if FAILED.format(code=evidence(release)) in line]
    assert len(warnings) == 1, output[-4000:]
    assert "Triton/FLA" in warnings[0] and "recorded" in warnings[0]
    assert not result["proven"]


def test_a_failed_warmup_is_recorded_for_the_next_start(warmup: Any, release: Any) -> None:
    result, _, _, _ = warmup
    assert {
        "module": "gdn-prefill/flashinfer",
        "codes": [evidence(release)],
        "this_fingerprint": True,
    } in (result["failure_cache"])


def test_the_next_start_decides_in_the_pre_flight(warmup: Any, release: Any) -> None:
    _, _, result, output = warmup
    assert "gdn-cached-failure" in result["status"]["blocking"]
    auto = run_for(result, "auto")
    assert auto["layers"] == ["triton"] * 2  # at init, before any warmup
    named = run_for(result, "flashinfer")
    assert named["error"] is not None and "gdn-cached-failure" in named["error"]["codes"]
    assert FAILED.format(code=evidence(release)) not in output


def test_a_failed_warmup_of_named_flashinfer_stops_the_start(warmup: Any, release: Any) -> None:
    result, _, _, _ = warmup
    run = run_for(result, "flashinfer")
    # This process already knows FlashInfer failed (the auto run's warmup): the named request is refused at
    # init, with the warmup's evidence.
    error = run["error"]
    assert error is not None and "BackendUnavailable" in error["bases"]
    assert evidence(release) in error["codes"]
