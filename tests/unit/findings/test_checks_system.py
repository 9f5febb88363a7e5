"""System checks: GPU and arch, memory for the nvcc build, disk and cache directories, environment traps.

Facts come from the real probes of this machine (no GPU, flashinfer 0.6.6, a real workspace and cache dir in
tmp_path); where a scenario needs another machine (an H200, a 64-core host, a 6 GiB container), that part of
the facts is written as data, the way the probes would report it there."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from finding_asserts import assert_filled, codes, only
from jitguard.facts import Facts, disk, flashinfer, packages
from jitguard.facts.gpu import GpuDevice, GpuFacts
from jitguard.facts.memory import CgroupLevel, MemoryFacts
from jitguard.facts.packages import PackageFacts, PackageInfo
from jitguard.findings import checks_system
from machine_facts import make_facts

GIB = 1024**3
FI_VERSION = packages.probe().version("flashinfer-python")
needs_nvcc_era = pytest.mark.skipif(
    flashinfer.era_of(FI_VERSION)[0] != "nvcc", reason="needs the installed FlashInfer to be in the nvcc era"
)


def gpus(*caps: tuple[str, int, int]) -> GpuFacts:
    devices = tuple(GpuDevice(i, name, a, b, 141 * GIB, f"GPU-{i}") for i, (name, a, b) in enumerate(caps))
    return GpuFacts(devices, "580.65.06", "13.0", "nvml", None)


H200 = gpus(("NVIDIA H200", 9, 0))


def host(*, avail_gib: float, cpus: int, limit_gib: float | None = None) -> MemoryFacts:
    levels = () if limit_gib is None else (CgroupLevel("/sys/fs/cgroup/ctr", int(limit_gib * GIB), 0, 0),)
    return MemoryFacts(
        int(avail_gib * GIB) + GIB, int(avail_gib * GIB), "v2", "/sys/fs/cgroup/ctr", levels, 0, cpus, None
    )


# --- GPU


def test_no_gpu_blocks_flashinfer_and_triton_never_torch(tmp_path: Path) -> None:
    facts = make_facts(tmp_path, gpu=GpuFacts((), None, None, None, "libnvidia-ml.so.1 not found"))
    for backend in ("flashinfer", "triton"):
        finding = only(checks_system.check(facts, backend), "gpu-none")
        assert finding.severity == "error" and finding.backend == backend
        assert "libnvidia-ml.so.1 not found" in finding.cause
        assert_filled(finding)
    assert checks_system.check(facts, "torch") == []


def test_this_machine_without_gpu(tmp_path: Path) -> None:
    facts = make_facts(tmp_path)
    if facts.gpu.present:
        pytest.skip("this machine has a GPU")
    assert "gpu-none" in codes(checks_system.check(facts, "flashinfer"))


def test_h200_is_fine_for_flashinfer_and_triton(tmp_path: Path) -> None:
    facts = make_facts(tmp_path, gpu=H200, memory=host(avail_gib=120, cpus=16))
    assert checks_system.check(facts, "flashinfer") == []
    assert checks_system.check(facts, "triton") == []


@needs_nvcc_era
def test_nvcc_era_gdn_does_not_run_on_blackwell(tmp_path: Path) -> None:
    facts = make_facts(tmp_path, gpu=gpus(("NVIDIA B200", 10, 0)), memory=host(avail_gib=120, cpus=16))
    finding = only(checks_system.check(facts, "flashinfer"), "gpu-arch-unsupported")
    assert finding.severity == "error"
    assert "10.0" in finding.title and "sm_90a" in finding.cause
    assert finding.evidence == ("GPU 0: NVIDIA B200, compute capability 10.0",)
    assert finding.fixes[0].command == "export JITGUARD_GDN_BACKEND=triton"
    assert any(f.command == "vllm serve <model> --gdn-prefill-backend triton" for f in finding.fixes)
    assert_filled(finding)


def cutedsl(facts: Facts, torch_version: str) -> Facts:
    fi = dataclasses.replace(
        facts.flashinfer, version="0.6.18", era="cutedsl", gdn_module=None, gdn_tu_count=None
    )
    installed = [p for p in facts.packages.installed if p.name != "torch"] + [
        PackageInfo("torch", torch_version, "/s")
    ]
    return dataclasses.replace(facts, flashinfer=fi, packages=PackageFacts(tuple(installed), ()))


def test_cutedsl_era_on_sm100_needs_a_cuda13_torch(tmp_path: Path) -> None:
    base = make_facts(tmp_path, gpu=gpus(("NVIDIA B200", 10, 0)))
    finding = only(checks_system.check(cutedsl(base, "2.9.0+cu128"), "flashinfer"), "gpu-arch-unsupported")
    assert "CUDA 13" in finding.cause and "12.8" in finding.cause
    assert any("cu130" in (f.command or "") for f in finding.fixes)
    assert_filled(finding)
    assert checks_system.check(cutedsl(base, "2.11.0+cu130"), "flashinfer") == []


def test_cutedsl_era_runs_on_sm120_but_not_on_ampere(tmp_path: Path) -> None:
    blackwell = cutedsl(make_facts(tmp_path, gpu=gpus(("RTX PRO 6000", 12, 0))), "2.11.0+cu130")
    assert checks_system.check(blackwell, "flashinfer") == []
    ampere = cutedsl(
        make_facts(tmp_path, gpu=gpus(("NVIDIA A100", 8, 0), ("NVIDIA H100", 9, 0))), "2.11.0+cu130"
    )
    finding = only(checks_system.check(ampere, "flashinfer"), "gpu-arch-unsupported")
    assert finding.evidence == ("GPU 0: NVIDIA A100, compute capability 8.0",)
    assert "NotImplementedError" in finding.cause


def test_triton_needs_compute_capability_8(tmp_path: Path) -> None:
    facts = make_facts(tmp_path, gpu=gpus(("Tesla T4", 7, 5)))
    finding = only(checks_system.check(facts, "triton"), "gpu-arch-unsupported")
    assert finding.backend == "triton"
    assert finding.fixes[0].command == "export JITGUARD_GDN_BACKEND=torch"
    assert not any("vllm" in (f.command or "") for f in finding.fixes)  # vLLM's fallback is this backend
    assert_filled(finding)


# --- memory


@needs_nvcc_era
def test_big_host_memory_limits_the_stock_parallelism(tmp_path: Path) -> None:
    facts = make_facts(tmp_path, gpu=H200, memory=host(avail_gib=120, cpus=64))
    finding = only(checks_system.check(facts, "flashinfer"), "memory-limits-parallelism")
    assert finding.severity == "info"
    # ninja's default on 64 CPUs is 66, capped by the 34 TUs; memory allows floor((120 - 6) / 5.7) = 20.
    assert "20 parallel jobs (stock: 34)" in finding.title
    assert any(f.command == "export MAX_JOBS=20" for f in finding.fixes)
    assert any(f.command == "jitguard build flashinfer-gdn --memory-budget 120G" for f in finding.fixes)
    assert any(f.command and "flashinfer-jit-cache==" in f.command for f in finding.fixes)
    assert_filled(finding)


@needs_nvcc_era
def test_no_finding_when_the_stock_build_fits(tmp_path: Path) -> None:
    facts = make_facts(tmp_path, gpu=H200, memory=host(avail_gib=120, cpus=16))
    assert checks_system.check(facts, "flashinfer") == []
    capped = make_facts(tmp_path, {"MAX_JOBS": "8"}, gpu=H200, memory=host(avail_gib=120, cpus=64))
    assert checks_system.check(capped, "flashinfer") == []


@needs_nvcc_era
def test_memory_budget_setting_is_used(tmp_path: Path) -> None:
    facts = make_facts(
        tmp_path, {"JITGUARD_MEMORY_BUDGET": "32G"}, gpu=H200, memory=host(avail_gib=120, cpus=16)
    )
    finding = only(checks_system.check(facts, "flashinfer"), "memory-limits-parallelism")
    assert "5 parallel jobs" in finding.title
    assert "JITGUARD_MEMORY_BUDGET=32.0 GiB" in finding.cause


@needs_nvcc_era
@pytest.mark.parametrize("name", ["JITGUARD_MEMORY_BUDGET", "JITGUARD_JOB_MEMORY"])
def test_a_zero_memory_setting_counts_as_unset_not_as_an_exception(tmp_path: Path, name: str) -> None:
    # Settings.from_env rejects it for the CLI (exit 2); the resolver and build hook call pre-flight directly.
    facts = make_facts(tmp_path, {name: "0"}, gpu=H200, memory=host(avail_gib=120, cpus=64))
    finding = only(checks_system.check(facts, "flashinfer"), "memory-limits-parallelism")
    assert "20 parallel jobs (stock: 34)" in finding.title


@needs_nvcc_era
def test_small_container_cannot_compile_at_all(tmp_path: Path) -> None:
    facts = make_facts(tmp_path, gpu=H200, memory=host(avail_gib=120, cpus=16, limit_gib=6))
    finding = only(checks_system.check(facts, "flashinfer"), "memory-too-small")
    assert finding.severity == "error"
    assert "6.0 GiB is available to this process (the cgroup limit)" in finding.cause
    assert any("cgroup v2 /sys/fs/cgroup/ctr: limit 6.0 GiB" in e for e in finding.evidence)
    assert any(f.command == "jitguard build flashinfer-gdn --arch 9.0a" for f in finding.fixes)
    assert_filled(finding)


@needs_nvcc_era
def test_a_prebuilt_module_needs_no_memory(tmp_path: Path) -> None:
    facts = make_facts(tmp_path, gpu=H200, memory=host(avail_gib=120, cpus=16, limit_gib=6))
    prebuilt = dataclasses.replace(
        facts.flashinfer, prebuilt_gdn=tmp_path / "x.so", prebuilt_source="cached_ops"
    )
    assert checks_system.check(dataclasses.replace(facts, flashinfer=prebuilt), "flashinfer") == []


# --- disk and cache directories


def test_unwritable_flashinfer_workspace_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "blocker").write_text("a file where the workspace base should be")
    facts = make_facts(tmp_path, {"FLASHINFER_WORKSPACE_BASE": str(tmp_path / "blocker")}, gpu=H200)
    finding = only(checks_system.check(facts, "flashinfer"), "cache-dir-unwritable")
    assert finding.severity == "error" and finding.backend == "flashinfer"
    assert "not a directory" in finding.cause
    assert any(f.command == "export FLASHINFER_WORKSPACE_BASE=/path/with/space" for f in finding.fixes)
    assert_filled(finding)


def test_own_cache_dir_findings_concern_every_backend(tmp_path: Path) -> None:
    shared = tmp_path / "cache"
    shared.mkdir()
    shared.chmod(0o777)
    facts = make_facts(tmp_path, gpu=H200, memory=host(avail_gib=120, cpus=16))
    for backend in ("flashinfer", "triton", "torch"):
        found = checks_system.check(facts, backend)
        finding = only(found, "cache-dir-untrusted")  # refused, not merely warned about
        assert "cache-dir-shared-writable" not in codes(found)
        assert (finding.severity, finding.backend) == ("warning", "any")
        assert "writable by every user" in finding.cause
        assert finding.fixes[0].command == f"chmod 700 {shared}"
        assert_filled(finding)


def test_a_shared_writable_flashinfer_workspace_is_still_a_warning_of_its_own(tmp_path: Path) -> None:
    facts = make_facts(tmp_path, gpu=H200, memory=host(avail_gib=120, cpus=16))
    workspace = Path(facts.flashinfer.workspace_dir)
    workspace.mkdir(parents=True)
    workspace.chmod(0o777)
    facts = make_facts(tmp_path, gpu=H200, memory=host(avail_gib=120, cpus=16))
    finding = only(checks_system.check(facts, "flashinfer"), "cache-dir-shared-writable")
    assert finding.backend == "flashinfer" and finding.fixes[0].command == f"chmod go-w {workspace}"


def test_unwritable_own_cache_is_a_warning(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    facts = make_facts(tmp_path, {"JITGUARD_CACHE_DIR": str(tmp_path / "file" / "jitguard")}, gpu=H200)
    finding = only(checks_system.check(facts, "torch"), "cache-dir-unwritable")
    assert (finding.severity, finding.backend) == ("warning", "any")
    assert_filled(finding)


@needs_nvcc_era
def test_low_disk_for_the_workspace(tmp_path: Path) -> None:
    facts = make_facts(tmp_path, gpu=H200, memory=host(avail_gib=120, cpus=16))
    ws = facts.disk.get(facts.flashinfer.workspace_dir)
    assert ws is not None
    low = dataclasses.replace(ws, free_bytes=300 * 1024**2)
    facts = dataclasses.replace(facts, disk=disk.DiskFacts((low, *facts.disk.paths[1:])))
    finding = only(checks_system.check(facts, "flashinfer"), "disk-low")
    assert "300 MiB" in finding.title.replace(".0 MiB", " MiB")
    assert_filled(finding)


# --- environment


@pytest.mark.parametrize(
    ("raw", "says"),
    [("abc", "'abc' is not"), ("4.0", "'4.0' is not"), ("0", "no limit at all")],
)
def test_max_jobs_that_flashinfer_ignores(tmp_path: Path, raw: str, says: str) -> None:
    facts = make_facts(tmp_path, {"MAX_JOBS": raw}, gpu=H200, memory=host(avail_gib=120, cpus=16))
    finding = only(checks_system.check(facts, "flashinfer"), "env-max-jobs-invalid")
    assert says in finding.cause
    assert finding.fixes[0].command is not None and re.fullmatch(
        r"export MAX_JOBS=[1-9]\d*", finding.fixes[0].command
    )
    assert_filled(finding)


def test_verbose_without_debug(tmp_path: Path) -> None:
    facts = make_facts(
        tmp_path, {"FLASHINFER_JIT_VERBOSE": "1"}, gpu=H200, memory=host(avail_gib=120, cpus=16)
    )
    finding = only(checks_system.check(facts, "flashinfer"), "env-jit-verbose-debug")
    assert finding.fixes[0].command == "export FLASHINFER_JIT_DEBUG=0"
    fixed = make_facts(
        tmp_path,
        {"FLASHINFER_JIT_VERBOSE": "1", "FLASHINFER_JIT_DEBUG": "0"},
        gpu=H200,
        memory=host(avail_gib=120, cpus=16),
    )
    assert checks_system.check(fixed, "flashinfer") == []


def test_arch_list_flashinfer_cannot_parse(tmp_path: Path) -> None:
    facts = make_facts(tmp_path, {"FLASHINFER_CUDA_ARCH_LIST": "9.0a,10.0a"}, gpu=H200)
    finding = only(checks_system.check(facts, "flashinfer"), "env-arch-list-invalid")
    assert finding.severity == "error"
    assert "'9.0a,10.0a'" in finding.title
    assert_filled(finding)
