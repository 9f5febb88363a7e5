"""classify() on log lines that cannot be produced on this machine (other toolchains, GPUs, kernels)."""

from __future__ import annotations

from jitguard.findings.classify import classify

GLIBCXX_LOAD_ERROR = (
    "OSError: /root/.cache/flashinfer/0.6.6/90a/cached_ops/gdn_prefill_sm90/gdn_prefill_sm90.so: "
    "/opt/conda/lib/libstdc++.so.6: version `GLIBCXX_3.4.32' not found "
    "(required by /root/.cache/flashinfer/0.6.6/90a/cached_ops/gdn_prefill_sm90/gdn_prefill_sm90.so)"
)


def test_glibcxx_load_error_names_the_missing_version_and_library() -> None:
    findings = classify(GLIBCXX_LOAD_ERROR, 1)
    assert [f.code for f in findings] == ["so-glibcxx-missing"]
    assert "GLIBCXX_3.4.32" in findings[0].evidence[0]


def test_cicc_killed_by_signal_9_is_oom() -> None:
    log = (
        "nvcc error   : 'cicc' died due to signal 9 (Kill signal)\nninja: build stopped: subcommand failed.\n"
    )
    assert [f.code for f in classify(log, 1)] == ["build-oom-killed"]


def test_old_nvcc_tensormap_replace_error_is_nvcc_too_old() -> None:
    log = 'gdn_prefill_kernel_bf16_g1b1a1i0.cu(12): error: identifier "tensormap_replace_global_address" is undefined\n'
    assert "nvcc-too-old" in [f.code for f in classify(log, 1)]


def test_zero_exit_with_clean_log_is_no_finding() -> None:
    assert classify("[1/2] c++ -c a.cc\n[2/2] c++ -shared a.o\n", 0) == []


def test_unexplained_failure_keeps_the_tail_when_no_error_line() -> None:
    findings = classify("step one\nstep two\nstep three\n", 2)
    assert findings[0].code == "build-failed"
    assert findings[0].evidence[-1] == "step three"


def test_log_path_parameter_reaches_the_finding_text() -> None:
    findings = classify("something broke: error 42\n", 1, log_path="/var/log/jitguard/x.log")
    rendered = " ".join([findings[0].cause, *[f.render() for f in findings[0].fixes]])
    assert "/var/log/jitguard/x.log" in rendered


def test_a_gpu_out_of_memory_error_is_not_a_compiler_oom() -> None:
    log = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n"
    assert "build-oom-killed" not in [f.code for f in classify(log, 1)]


def test_a_sigterm_from_the_launcher_is_not_an_oom() -> None:
    log = "jitguard-launch: killed by signal 15 (SIGTERM)\nninja: build stopped: interrupted by user.\n"
    assert "build-oom-killed" not in [f.code for f in classify(log, 2)]


# The CuTeDSL's own libraries failing at kernel compile, as reported (NVIDIA/cutlass #3170, #3259, #3329;
# vllm-project/vllm #44949 and the GPUModuleOp TypeError of a mixed -libs-base/-libs-cu13 install).
DSL_SYMPTOMS = {
    "error: 'llvm.mlir.global_dtors' op requires attribute 'data'": "'llvm.mlir.global_dtors' op",
    "TypeError: mlir_global_dtors() missing 1 required positional argument: 'data'": "mlir_global_dtors()",
    "TypeError: GPUModuleOp.__init__() got an unexpected keyword argument 'targets'": "GPUModuleOp",
    "ptxas application ptx input, line 1008; error   : Unexpected instruction types specified for '_mma'": (
        "'_mma'"
    ),
    "JIT session error: Symbols not found: [ cuda_dialect_unload_library_once, _cudaSetDevice ]": (
        "cuda_dialect_"
    ),
}


def test_the_dsls_own_library_faults_are_named_with_the_reinstall() -> None:
    for line, shown in DSL_SYMPTOMS.items():
        log = f'Traceback (most recent call last):\n  File "x.py", line 1\n{line}\n'
        [finding] = classify(log, 1)
        assert finding.code == "cutlass-dsl-compile-broken", line
        assert shown in finding.title and list(finding.evidence) == [line], line
        commands = " ".join(f.command or "" for f in finding.fixes)
        assert (
            "jitguard doctor --backend flashinfer" in commands and "--force-reinstall --no-deps" in commands
        )


def test_a_kernel_error_of_its_own_is_not_blamed_on_the_install() -> None:
    log = "TypeError: make_layout() got an unexpected keyword argument 'stride'\n"  # a kernel's own bug
    assert [f.code for f in classify(log, 1)] == ["build-failed"]
