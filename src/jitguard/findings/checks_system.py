"""Pre-flight checks of the machine: GPU and arch, memory for the nvcc build, and the environment variables whose
values are traps; the directories builds write to are ``checks_disk``'s.

The torch backend is never blocked by these (it runs anywhere); the findings about jitguard's own cache
directory concern every backend and carry ``backend="any"``.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from jitguard.config import MemorySpec, format_bytes, read
from jitguard.errors import ConfigError
from jitguard.facts.capacity import ninja_default_jobs, plan_jobs
from jitguard.facts.flashinfer import ERA_CUTEDSL, ERA_NVCC
from jitguard.findings.catalog import make
from jitguard.findings.checks_disk import needs_nvcc_build, own_cache, workspace
from jitguard.findings.checks_jitguard import unit
from jitguard.findings.checks_packages import cuda_tag
from jitguard.findings.model import Finding

if TYPE_CHECKING:
    from jitguard.facts import Facts

GIB = 1024**3
TRITON_MIN_CAPABILITY = (8, 0)
BACKEND_LABELS = {
    "flashinfer": "FlashInfer backend",
    "triton": "Triton (FLA) backend",
    "torch": "PyTorch backend",
}  # Triton's supported NVIDIA hardware: compute capability 8.0+


def check(facts: Facts, backend: str) -> list[Finding]:
    cache_dir = unit(backend, lambda: own_cache(facts))
    if backend not in ("flashinfer", "triton"):
        return cache_dir
    found = unit(backend, lambda: _gpu(facts, backend))
    if backend == "flashinfer":
        # One unit each, so a fact that could not be collected costs only the checks that read it.
        for check in (_memory, workspace, _environment):
            found += unit(backend, functools.partial(_if_installed, check, facts))
    return found + cache_dir


def _if_installed(check: Callable[[Facts], list[Finding]], facts: Facts) -> list[Finding]:
    return check(facts) if facts.flashinfer.installed else []


# --- GPU


def _gpu(facts: Facts, backend: str) -> list[Finding]:
    gpu = facts.gpu
    if not gpu.present:
        return [
            make(
                "gpu-none",
                backend=backend,
                evidence=[f"GPU probe: {gpu.reason}"],
                reason=gpu.reason,
                backend_label=BACKEND_LABELS[backend],
            )
        ]
    if backend == "triton":
        return _triton_arch(facts)
    return _flashinfer_arch(facts)


def _device_lines(facts: Facts, pairs: set[tuple[int, int]]) -> list[str]:
    return [
        f"GPU {d.index}: {d.name}, compute capability {d.capability}"
        for d in facts.gpu.devices
        if (d.major, d.minor) in pairs
    ]


def _flashinfer_arch(facts: Facts) -> list[Finding]:
    fi, packages = facts.flashinfer, facts.packages
    if fi.era not in (ERA_NVCC, ERA_CUTEDSL):
        return []  # missing or too old: the package checks say so
    found = []
    pairs = set(facts.gpu.capability_pairs())
    unsupported = {p for p in pairs if not fi.gdn_supports(*p)}
    if unsupported:
        cap = ", ".join(f"{a}.{b}" for a, b in sorted(unsupported))
        detail = (
            f"flashinfer-python {fi.version} builds its GDN prefill module for sm_90a only (nvcc era), and "
            "sm_90a code runs on compute capability 9.0 alone."
            if fi.era == ERA_NVCC
            else f"flashinfer-python {fi.version} has CuTeDSL GDN prefill kernels for SM90, SM100 and SM120 "
            "only; other GPUs raise NotImplementedError('GDN prefill DSL kernel is unavailable')."
        )
        found.append(
            _arch_finding(
                facts,
                "flashinfer",
                cap,
                unsupported,
                f"FlashInfer {fi.version} GDN prefill",
                fi.gdn_capabilities,
                detail,
                "triton",
            )
        )
    # CuTeDSL on SM100 needs a CUDA 13 torch: its SM100 kernels load the DSL's CUDA 13 libraries.
    blackwell = {p for p in pairs - unsupported if p[0] == 10}
    old_torch = packages.torch_flavour == "cuda" and int((packages.torch_cuda or "13").split(".")[0]) < 13
    if fi.era == ERA_CUTEDSL and blackwell and old_torch:
        cap = ", ".join(f"{a}.{b}" for a, b in sorted(blackwell))
        found.append(
            _arch_finding(
                facts,
                "flashinfer",
                cap,
                blackwell,
                f"FlashInfer {fi.version} GDN prefill with torch {packages.version('torch')}",
                "SM100 only with a CUDA 13 build of PyTorch",
                "The SM100 CuTeDSL kernels need the DSL's CUDA 13 libraries and a CUDA 13 PyTorch "
                f"(this one is CUDA {packages.torch_cuda}).",
                "triton",
                upgrade="pip install torch --index-url https://download.pytorch.org/whl/cu130",
                package="torch",
            )
        )
    return found


def _triton_arch(facts: Facts) -> list[Finding]:
    pairs = set(facts.gpu.capability_pairs())
    unsupported = {p for p in pairs if p < TRITON_MIN_CAPABILITY}
    if not unsupported:
        return []
    cap = ", ".join(f"{a}.{b}" for a, b in sorted(unsupported))
    finding = _arch_finding(
        facts,
        "triton",
        cap,
        unsupported,
        "Triton (FLA)",
        "compute capability 8.0 and newer",
        "FLA's chunked kernels use Triton features (bf16 tensor-core dots) that older GPUs lack.",
        "torch",
        upgrade="pip install -U triton fla-core",
        package="triton",
    )
    # vLLM has no PyTorch GDN backend: the vLLM fix (choose triton) is this very backend.
    return [replace(finding, fixes=tuple(f for f in finding.fixes if "vllm" not in (f.command or "")))]


def _arch_finding(
    facts: Facts,
    backend: str,
    cap: str,
    pairs: set[tuple[int, int]],
    component: str,
    supported: str,
    detail: str,
    alternative: str,
    *,
    upgrade: str = "pip install -U flashinfer-python",
    package: str = "flashinfer-python",
) -> Finding:
    names = sorted({d.name for d in facts.gpu.devices if (d.major, d.minor) in pairs})
    return make(
        "gpu-arch-unsupported",
        backend=backend,
        evidence=_device_lines(facts, pairs),
        component=component,
        capability=cap,
        gpu_name=", ".join(names),
        supported=supported,
        detail=detail,
        alternative=alternative,
        package=package,
        upgrade_command=upgrade,
    )


# --- memory


def _settings_budget(facts: Facts) -> tuple[MemorySpec | None, int | None]:
    """JITGUARD_MEMORY_BUDGET / JITGUARD_JOB_MEMORY; malformed or zero values are the CLI's to report (exit 2,
    Settings.from_env), so here they count as unset: pre-flight never raises over a setting."""
    env = facts.environment
    budget = job = None
    with contextlib.suppress(ConfigError):
        budget = read("JITGUARD_MEMORY_BUDGET", env.as_dict())
    with contextlib.suppress(ConfigError):
        job = read("JITGUARD_JOB_MEMORY", env.as_dict())
    return budget, job


def _memory(facts: Facts) -> list[Finding]:
    if not needs_nvcc_build(facts):
        return []
    fi, memory, env = facts.flashinfer, facts.memory, facts.environment
    budget, job_memory = _settings_budget(facts)
    plan = plan_jobs(memory, budget=budget, job_memory=job_memory, requested_jobs=None)
    if plan.budget_bytes is None:
        return []  # memory unknown: nothing to say
    module = fi.gdn_module or "the GDN module"
    arch = fi.arch_list[0] if fi.arch_list else "9.0a"
    evidence = [*memory.evidence(), f"plan: {plan.reason}"]
    common: dict[str, Any] = {
        "module": module,
        "job_memory": format_bytes(plan.job_memory),
        "budget": format_bytes(plan.budget_bytes),
        "headroom": format_bytes(plan.headroom),
        "limited_by": {"cgroup": "the cgroup limit", "meminfo": "MemAvailable"}.get(
            memory.limited_by or "", "set"
        ),
        "version": fi.version,
        "cuda_tag": cuda_tag(facts),
    }
    if budget is not None:
        common["limited_by"] = f"JITGUARD_MEMORY_BUDGET={budget}"
    if plan.jobs == 0:
        limit = memory.cgroup_limit
        return [
            make(
                "memory-too-small",
                backend="flashinfer",
                evidence=evidence,
                **common,
                workspace=fi.workspace_dir,
                arch=arch,
                limit=format_bytes(limit) if limit is not None else "no cgroup limit",
            )
        ]
    # What stock FlashInfer would run: MAX_JOBS when it is honoured, else ninja's default; never more at once
    # than there are translation units.
    tus = fi.gdn_tu_count or 34
    if env.max_jobs_value is not None and env.max_jobs_value > 0:
        default_jobs, source = env.max_jobs_value, f"MAX_JOBS={env.max_jobs_value}"
    elif env.max_jobs_value == 0:
        default_jobs, source = tus, "MAX_JOBS=0: no limit, every translation unit"
    else:
        cpus = memory.cpu_limit
        default_jobs = ninja_default_jobs(cpus)
        source = f"ninja's default for {cpus} CPUs: CPUs + 2 = {default_jobs}"
        if default_jobs > tus:
            source += f", capped by the {tus} translation units"
    concurrent = min(default_jobs, tus)
    if plan.memory_jobs is None or plan.memory_jobs >= concurrent:
        return []
    return [
        make(
            "memory-limits-parallelism",
            backend="flashinfer",
            evidence=evidence,
            **common,
            jobs=plan.jobs,
            default_jobs=concurrent,
            default_source=source,
            default_need=format_bytes(concurrent * plan.job_memory),
            reason=plan.reason,
            budget_arg=_budget_arg(plan.budget_bytes),
        )
    ]


def _budget_arg(budget: int) -> str:
    return f"{max(1, budget // GIB)}G"


# --- environment


def _environment(facts: Facts) -> list[Finding]:
    env, fi = facts.environment, facts.flashinfer
    found = []
    if fi.arch_list_error:
        found.append(
            make(
                "env-arch-list-invalid",
                backend="flashinfer",
                evidence=[f"FLASHINFER_CUDA_ARCH_LIST={env.get('FLASHINFER_CUDA_ARCH_LIST')!r}"],
                value=env.get("FLASHINFER_CUDA_ARCH_LIST"),
                detail=fi.arch_list_error,
            )
        )
    if not env.max_jobs_valid:  # every nvcc-built FlashInfer module, in both eras
        raw = env.max_jobs or ""
        cpus = facts.memory.cpu_limit
        if env.max_jobs_value == 0:
            detail = "'0' passes that test, but ninja reads -j 0 as no limit at all."
            default = (
                f"all {fi.gdn_tu_count} translation units" if fi.gdn_tu_count else "every translation unit"
            )
        else:
            detail = f"{raw!r} is not, so it is dropped without a word."
            default = f"ninja's default of {ninja_default_jobs(cpus)} jobs (CPUs + 2)"
        digits = "".join(c for c in raw if c.isdigit())
        suggested = int(digits) if digits and int(digits) > 0 else max(1, facts.memory.cpu_limit)
        found.append(
            make(
                "env-max-jobs-invalid",
                backend="flashinfer",
                evidence=[f"MAX_JOBS={raw!r}"],
                max_jobs=raw,
                detail=detail,
                default_jobs=default,
                suggested=suggested,
            )
        )
    if env.jit_debug_trap:
        found.append(
            make(
                "env-jit-verbose-debug",
                backend="flashinfer",
                evidence=["FLASHINFER_JIT_VERBOSE=1", "FLASHINFER_JIT_DEBUG is not set"],
            )
        )
    return found
