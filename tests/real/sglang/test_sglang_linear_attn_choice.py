"""The plugin against the REAL code of released SGLang versions, each with the FlashInfer it pins, every layout
in each FlashInfer era it met (by default 0.5.15: process-wide choice, FlashInfer 0.6.12 with the nvcc-built
GDN prefill; 0.5.16 by JITGUARD_SGLANG_VERSIONS: process-wide choice, FlashInfer 0.6.14, CuTeDSL; 0.5.23: per-runner choice, FlashInfer
0.7.2, CuTeDSL; others with JITGUARD_SGLANG_VERSIONS). What dooms FlashInfer prefill follows the era.

Each module-scoped fixture is one engine start: SGLang's own ``load_plugins()`` loads jitguard's entry point
and applies its hooks, then, per run, a real ``ServerArgs`` is built and resolved, pickled as the launcher
hands it to a scheduler, and SGLang's own linear-attention choice is made from it. Stand-ins are the GPU only
(see sglang_scenario.py); the facts behind each verdict come from jitguard's real probes of the host.
"""

from __future__ import annotations

from typing import Any

import pytest

pytestmark = pytest.mark.slow

CUDA_TORCH = (
    "2.11.0+cu130"  # the torch SGLang 0.5.15 pins, CUDA 13 build: the one fact a CPU venv cannot have
)
FALLBACK = "jitguard: SGLang chose FlashInfer"
PER_RUNNER = (0, 5, 18)

Result = tuple[dict[str, Any], str]


def fallback_warnings(output: str) -> list[str]:
    return [line for line in output.splitlines() if FALLBACK in line]


def per_runner(release: Any) -> bool:
    return bool(release.version_tuple >= PER_RUNNER)


def auto_prefill(release: Any) -> dict[str, Any]:
    """A run without options in which SGLang itself picks FlashInfer prefill, where it does (0.5.18+: its
    validated GDN domain, passed as its attention registry passes it)."""
    return {"options": {}, "prefill_default": "flashinfer" if per_runner(release) else None}


def blackwell_defaults() -> dict[str, Any]:
    """A run without linear-attention options on SM100 with a bf16 state: SGLang picks FlashInfer decode."""
    return {"options": {"mamba_ssm_dtype": "bfloat16"}}


def assert_hooked(result: dict[str, Any], release: Any) -> None:
    assert result["sglang"] == release.version
    assert result["registered"]
    targets = {h["target"].rsplit(".", 1)[-1]: h for h in result["hooks"]}
    main = "resolve_linear_attn_backends" if per_runner(release) else "initialize_linear_attn_config"
    assert targets[main]["type"] == "after" and targets[main]["applied"]
    if not per_runner(release):  # the options as given are kept before SGLang's own decode default
        assert targets["_handle_linear_attn_backend"]["type"] == "before"


def phases_on(run: dict[str, Any], backend: str) -> set[str]:
    return {p for p, b in run["backends"].items() if b == backend}


# ---- FlashInfer workable: an H200 host with the CUDA libraries --------------------------------------------
@pytest.fixture(scope="module")
def hopper(release: Any, hosts: Any) -> Result:
    runs = [
        {"options": {"linear_attn_prefill_backend": "flashinfer"}},
        {"options": {"linear_attn_backend": "flashinfer"}},
        auto_prefill(release),
    ]
    spec = {"runs": runs, "torch_build": CUDA_TORCH, "build_hook": True}
    return release.run(spec, hosts.gpu("H200", libcuda=True))


def test_the_plugin_is_installed_by_sglangs_own_loader(hopper: Result, release: Any) -> None:
    assert_hooked(hopper[0], release)


def test_workable_flashinfer_keeps_every_sglang_choice(hopper: Result) -> None:
    result, output = hopper
    assert result["status"]["usable"], result["status"]
    for run in result["runs"]:
        assert run["error"] is None, run["error"]
        assert run["backends"] == run["stock"]
    assert result["runs"][0]["backends"]["prefill"] == "flashinfer"
    assert fallback_warnings(output) == []
    assert result["runs"][-1]["looks"] == 1  # one look at FlashInfer for the whole process


def test_flashinfer_builds_in_sglang_are_supervised(hopper: Result) -> None:
    assert hopper[0]["build_hook_active"]  # jitguard.install(), applied by the plugin


# ---- an H200 host without libcuda ----------------------------------------------------------------------
@pytest.fixture(scope="module")
def hopper_no_libcuda(release: Any, hosts: Any) -> Result:
    runs = [
        {"options": {}},
        auto_prefill(release),
        {"options": {"linear_attn_prefill_backend": "flashinfer"}},
        {"options": {"linear_attn_backend": "flashinfer"}},
    ]
    return release.run({"runs": runs, "torch_build": CUDA_TORCH}, hosts.gpu("H200", libcuda=False))


def test_triton_everywhere_is_untouched_and_never_looks(hopper_no_libcuda: Result) -> None:
    run = hopper_no_libcuda[0]["runs"][0]
    assert run["error"] is None and run["backends"] == run["stock"] == {p: "triton" for p in run["stock"]}
    assert run["looks"] == 0


def test_nvcc_era_prefill_named_without_libcuda_stops_at_start_up(
    hopper_no_libcuda: Result, release: Any
) -> None:
    if release.era == "cutedsl":
        pytest.skip(
            f"SGLang {release.version} pins FlashInfer {release.flashinfer}: its GDN prefill links nothing"
        )
    result, output = hopper_no_libcuda
    assert result["status"]["blocking"] == ["link-missing-libcuda"]
    for run, named in zip(
        result["runs"][2:], ("--linear-attn-prefill-backend", "--linear-attn-backend"), strict=True
    ):
        assert run["stock"]["prefill"] == "flashinfer"
        error = run["error"]
        assert error is not None and "BackendUnavailable" in error["bases"]
        assert "link-missing-libcuda" in error["codes"]
        assert f"({named} flashinfer)" in error["message"]
        assert "--linear-attn-prefill-backend triton" in error["message"]
    assert fallback_warnings(output) == []  # SGLang 0.5.15 never picks FlashInfer prefill by itself


def test_cutedsl_era_prefill_needs_no_libcuda(hopper_no_libcuda: Result, release: Any) -> None:
    if release.era == "nvcc":
        pytest.skip(
            f"SGLang {release.version} pins FlashInfer {release.flashinfer}: its GDN prefill links -lcuda"
        )
    result, output = hopper_no_libcuda
    assert result["status"]["usable"], result["status"]
    for run in result["runs"][1:]:
        assert run["error"] is None and run["backends"] == run["stock"]
    for run in result["runs"][2:] if not per_runner(release) else result["runs"][1:]:  # SGLang's own or named
        assert run["backends"]["prefill"] == "flashinfer"
    assert fallback_warnings(output) == []


# ---- CuTeDSL era, an H200 host: the DSL installed with pip --target, its packages off the path -------------
# FlashInfer swallows `import cutlass` failing and raises NotImplementedError('SM90 GDN prefill DSL kernel is
# unavailable') at the first request; SGLang alone would start and die there.
@pytest.fixture(scope="module")
def dsl_off_path(release: Any, hosts: Any, tmp_path_factory: pytest.TempPathFactory) -> Result:
    if release.era == "nvcc":
        pytest.skip(f"SGLang {release.version} pins an nvcc-era FlashInfer {release.flashinfer}: no DSL")
    broken = release.without_dsl_path(tmp_path_factory.mktemp(f"sglang-dsl-off-path-{release.version}"))
    runs = [auto_prefill(release), {"options": {"linear_attn_prefill_backend": "flashinfer"}}]
    spec = {"runs": runs, "torch_build": CUDA_TORCH}
    result, output = broken.run(spec, hosts.gpu("H200", libcuda=True))
    return {**result, "dsl": str(broken.extra[0])}, output


def test_dsl_off_the_path_blocks_flashinfer_prefill(dsl_off_path: Result) -> None:
    result, _ = dsl_off_path
    assert result["status"]["blocking"] == ["cutlass-dsl-off-path"]


def test_dsl_off_the_path_refuses_named_prefill_with_the_directory(dsl_off_path: Result) -> None:
    result, _ = dsl_off_path
    error = result["runs"][1]["error"]
    assert error is not None and "BackendUnavailable" in error["bases"]
    assert error["codes"] == ["cutlass-dsl-off-path"]
    assert f"export PYTHONPATH={result['dsl']}/nvidia_cutlass_dsl/dsl_packages" in error["message"]


def test_dsl_off_the_path_sends_sglangs_own_flashinfer_prefill_to_triton(
    dsl_off_path: Result, release: Any
) -> None:
    if not per_runner(release):
        pytest.skip(f"SGLang {release.version} never picks FlashInfer prefill by itself")
    result, output = dsl_off_path
    run = result["runs"][0]
    assert run["stock"]["prefill"] == "flashinfer" and run["backends"]["prefill"] == "triton"
    [warning] = fallback_warnings(output)
    assert "[cutlass-dsl-off-path]" in warning and "export PYTHONPATH=" in warning


# ---- a failure recorded in jitguard's failure cache, on an H200 --------------------------------------------
@pytest.fixture(scope="module")
def cached_failure(release: Any, hosts: Any) -> Result:
    runs = [auto_prefill(release), {"options": {"linear_attn_prefill_backend": "flashinfer"}}]
    spec = {"runs": runs, "torch_build": CUDA_TORCH, "failure": "build-oom-killed"}
    return release.run(spec, hosts.gpu("H200", libcuda=True))


def test_cached_failure_refuses_named_prefill(cached_failure: Result) -> None:
    result, _ = cached_failure
    # Pre-flight alone passes on this host (the workable test): the cache entry is the only reason.
    assert result["status"]["blocking"] == ["gdn-cached-failure"]
    error = result["runs"][1]["error"]
    assert error is not None and "gdn-cached-failure" in error["codes"]


def test_cached_failure_sends_sglangs_own_flashinfer_prefill_to_triton(
    cached_failure: Result, release: Any
) -> None:
    if not per_runner(release):
        pytest.skip(f"SGLang {release.version} never picks FlashInfer prefill by itself")
    result, output = cached_failure
    run = result["runs"][0]
    assert run["stock"]["prefill"] == "flashinfer" and run["backends"]["prefill"] == "triton"
    [warning] = fallback_warnings(output)
    assert "[gdn-cached-failure]" in warning and "Fix:" in warning


# ---- a B200 host: SGLang picks FlashInfer decode itself; no libcuda ------------------------------------------
@pytest.fixture(scope="module")
def blackwell(release: Any, hosts: Any) -> Result:
    runs = [
        blackwell_defaults(),
        {"options": {"mamba_ssm_dtype": "bfloat16", "linear_attn_prefill_backend": "flashinfer"}},
    ]
    spec = {"runs": runs, "torch_build": CUDA_TORCH, "sglang_gpu": "sm100", "failure": "build-oom-killed"}
    return release.run(spec, hosts.gpu("B200", libcuda=False))


def test_flashinfer_decode_is_not_judged_by_the_prefill_build(blackwell: Result, release: Any) -> None:
    result, output = blackwell
    run = result["runs"][0]
    # No libcuda and a recorded prefill failure: neither stops FlashInfer's in-process decode kernels.
    assert run["stock"]["decode"] == "flashinfer"
    assert run["error"] is None and run["backends"] == run["stock"]
    if per_runner(release):
        assert run["backends"]["verify"] == "flashinfer"  # unset verify follows decode
    assert fallback_warnings(output) == []


def test_blackwell_prefill_is_judged_by_its_own_kernel(blackwell: Result) -> None:
    # Named FlashInfer prefill on SM100: the recorded failure stops it (both eras); the missing libcuda does
    # not, because FlashInfer's SM100 GDN prefill is a CuTeDSL kernel even in 0.6.x.
    error = blackwell[0]["runs"][1]["error"]
    assert error is not None and "gdn-cached-failure" in error["codes"]
    assert "link-missing-libcuda" not in error["codes"]


# ---- this machine as it is (no GPU; the torch pip chose), SGLang told it runs on SM100 ---------------------
def gpu_less_codes() -> set[str]:
    """What blocks FlashInfer on this GPU-less machine: no GPU, and with a CPU (or ROCm) torch that too; a CUDA
    torch (pip's default pick) is not a finding of its own."""
    from jitguard.facts import packages

    flavour = packages.probe().torch_flavour
    return {"gpu-none"} | ({"torch-no-cuda"} if flavour in ("cpu", "rocm") else set())


@pytest.fixture(scope="module")
def no_gpu(release: Any, hosts: Any) -> Result:
    runs = [
        blackwell_defaults(),
        {"options": {"mamba_ssm_dtype": "bfloat16", "linear_attn_decode_backend": "flashinfer"}},
        {"options": {"linear_attn_prefill_backend": "flashinfer"}},
    ]
    return release.run({"runs": runs, "sglang_gpu": "sm100"}, hosts.machine())


def test_sglangs_own_flashinfer_decode_falls_back_with_one_warning(no_gpu: Result, release: Any) -> None:
    result, output = no_gpu
    assert gpu_less_codes() <= set(result["status"]["blocking"])
    run = result["runs"][0]
    assert run["error"] is None
    moved = {"decode", "verify"} if per_runner(release) else {"decode"}
    assert {p for p, b in run["stock"].items() if b == "flashinfer"} == moved
    assert phases_on(run, "triton") == set(run["backends"])
    [warning] = fallback_warnings(output)
    assert "[gpu-none]" in warning and "Fix:" in warning and "Triton" in warning


def test_decode_named_by_its_own_flag_stops_at_start_up(no_gpu: Result) -> None:
    # Up to 0.5.18 SGLang overwrites an unset decode option with its own default: jitguard tells them apart.
    error = no_gpu[0]["runs"][1]["error"]
    assert error is not None and "BackendUnavailable" in error["bases"]
    assert "(--linear-attn-decode-backend flashinfer)" in error["message"]
    assert "gpu-none" in error["codes"]


def test_prefill_named_on_a_gpu_less_machine_stops(no_gpu: Result) -> None:
    error = no_gpu[0]["runs"][2]["error"]
    assert error is not None and gpu_less_codes() <= set(error["codes"])


# ---- turned off: JITGUARD_DISABLE=1, or jitguard left out of SGLang's allow-list ----------------------------
@pytest.fixture(scope="module", params=[{"JITGUARD_DISABLE": "1"}, {"SGLANG_PLUGINS": "another-plugin"}])
def turned_off(request: pytest.FixtureRequest, release: Any, hosts: Any) -> Result:
    runs = [blackwell_defaults(), {"options": {"linear_attn_prefill_backend": "flashinfer"}}]
    spec = {"runs": runs, "sglang_gpu": "sm100", "build_hook": True}
    return release.run(spec, hosts.machine(**request.param))


def test_turned_off_leaves_sglang_stock(turned_off: Result) -> None:
    result, output = turned_off
    assert not result["registered"] and result["hooks"] == []
    assert not result["build_hook_active"]
    for run in result["runs"]:
        assert run["error"] is None and run["backends"] == run["stock"]
        assert run["looks"] == 0
    assert result["runs"][1]["backends"]["prefill"] == "flashinfer"  # doomed here, and still SGLang's choice
    assert "jitguard:" not in output
