"""Pre-flight: the findings for one backend, from the facts alone (no build, no import of heavy packages).

Each area module (toolchain, system, packages) holds the checks for its facts; this module joins them, so the
doctor, the GDN resolver, the build hook and the vLLM plugin all ask the same question the same way.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from jitguard.cutedsl import dsl_checks
from jitguard.facts import FactUnavailable
from jitguard.facts.flashinfer import gdn_kernel_modules
from jitguard.facts.import_probe import probe_import
from jitguard.findings import (
    checks_arch,
    checks_filesystems,
    checks_packages,
    checks_system,
    checks_toolchain,
    checks_triton,
)
from jitguard.findings.checks_packages import import_findings
from jitguard.findings.model import Finding, sort_findings

if TYPE_CHECKING:
    from jitguard.facts import Facts
    from jitguard.facts.flashinfer import GdnKernelModule

BACKENDS = ("flashinfer", "triton", "torch")
# Pre-flight codes that doom building any FlashInfer nvcc JIT module here, whichever module (compile or link).
JIT_BUILD_DOOM = frozenset(
    {
        "nvcc-missing",
        "ninja-missing",
        "cxx-missing",
        "cuda-headers-missing",
        "link-missing-libcuda",
        "link-missing-libcudart",
        "nvcc-arch-unsupported",  # for the choice's own module kind (findings.checks_arch.for_choice)
        "torch-missing",  # FlashInfer's cpp_ext reads torch's C++ ABI flag to write the ninja file
    }
)


def preflight(facts: Facts, backend: str) -> list[Finding]:
    """Every finding about ``backend`` (one of BACKENDS), most severe first."""
    if backend not in BACKENDS:
        raise ValueError(f"unknown backend {backend!r}; expected one of {', '.join(BACKENDS)}")
    found: list[Finding] = []
    # Packages first: when the package is missing, toolchain findings about it are noise.
    found += checks_packages.check(facts, backend)
    found += checks_system.check(facts, backend)
    found += checks_toolchain.check(facts, backend)
    found += checks_triton.check(facts, backend)
    found += checks_arch.check(facts, backend)
    found += checks_filesystems.check(facts, backend)
    return sort_findings(_dedupe(found))


def jit_preflight(facts: Facts) -> list[Finding]:
    """Every finding about building and loading FlashInfer's nvcc JIT modules other than GDN prefill (the
    ones an engine picks on its own: sampling, MoE, attention), most severe first. The package findings are
    FlashInfer's; the toolchain ones apply in every FlashInfer era (``checks_toolchain.jit_build``)."""
    found = checks_packages.check(facts, "flashinfer") + checks_toolchain.jit_build(facts)
    return sort_findings(_dedupe(found))


def blocking(findings: list[Finding]) -> list[Finding]:
    return [f for f in findings if f.blocking]


def _dedupe(findings: list[Finding]) -> list[Finding]:
    seen: set[tuple[str, str, str]] = set()
    unique = []
    for f in findings:
        key = (f.code, f.backend, f.title)  # the title tells two facts' `fact-unavailable` apart
        if key not in seen:
            seen.add(key)
            unique.append(f)
    return unique


# The module each backend's GDN prefill path imports; a broken install shows up here first.
DEEP_IMPORTS = {"flashinfer": "flashinfer.gdn_prefill", "triton": "fla.ops.gated_delta_rule"}


def deep_checks(
    facts: Facts, backend: str, *, timeout: float = 120, env: Mapping[str, str] | None = None
) -> list[Finding]:
    """Import the backend's package in a subprocess and report the original error (``doctor --deep``).

    Slower than pre-flight (seconds: it really imports), so never part of it. Skipped when pre-flight already
    knows the package is missing. In FlashInfer's CuTeDSL era it also imports the GDN prefill kernel module of
    each GPU arch here (SM90 when none is known), at the same time: FlashInfer swallows that module's import
    error and later raises only NotImplementedError('... DSL kernel is unavailable'). ``env``: the
    subprocesses' environment (default os.environ).
    """
    from concurrent.futures import ThreadPoolExecutor

    module = DEEP_IMPORTS.get(backend)
    if module is None:
        return []
    package = "flashinfer-python" if backend == "flashinfer" else "fla-core"
    if package in facts.packages.missing:
        return []
    kernels = _gdn_kernels(facts) if backend == "flashinfer" else ()
    with ThreadPoolExecutor(max_workers=1 + len(kernels)) as pool:
        first = pool.submit(probe_import, module, timeout=timeout, env=env)
        probes = [(k, pool.submit(probe_import, k.module, timeout=timeout, env=env)) for k in kernels]
    version = facts.flashinfer.version if backend == "flashinfer" else None
    cause = dsl_checks.dsl_cause(first.result(), facts) if backend == "flashinfer" else None
    found = import_findings(
        first.result(),
        version=version,
        backend=backend,
        context=cause["context"] if cause else "",
        repair=(cause["repair"], cause["repair_command"]) if cause else None,
    )
    if found:
        return found  # the package itself fails to import: its kernel module fails the same way, first
    for kernel, probe in probes:
        found += dsl_checks.kernel_import(probe.result(), kernel, facts)
    return found


def _gdn_kernels(facts: Facts) -> tuple[GdnKernelModule, ...]:
    """The CuTeDSL-era GDN prefill kernel modules for the GPUs here: their archs from the GPU facts, else from
    FLASHINFER_CUDA_ARCH_LIST, else SM90."""

    try:
        fi = facts.flashinfer
        try:
            majors = [major for major, _ in facts.gpu.capability_pairs()]
        except FactUnavailable:
            majors = []
        if not majors:
            majors = [int(arch.split(".")[0]) for arch in fi.arch_list]
        return gdn_kernel_modules(fi, majors)
    except FactUnavailable:
        return ()
