"""Pre-flight checks of the Python packages each backend needs, from PackageFacts and FlashinferFacts.

flashinfer: torch (a CUDA build), flashinfer-python new enough for GDN prefill, its companions at matching
versions (jit-cache, cubin: a mismatch makes `import flashinfer` raise), nvidia-cutlass-dsl at FlashInfer's
own floor in the CuTeDSL era, its wheels' files intact and importable the way the engine imports them, with each
GPU arch's GDN kernel module present (``dsl_checks``); info when a prebuilt module makes
the compile unnecessary or when every process compiles. triton: torch, fla-core >= 0.6.0, triton. torch: torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from packaging.version import InvalidVersion, Version

from jitguard.cutedsl import dsl_checks
from jitguard.facts.flashinfer import (
    ERA_CUTEDSL,
    ERA_NONE,
    ERA_NVCC,
    ERA_TOO_OLD,
    FlashinferFacts,
)
from jitguard.facts.import_probe import ImportProbe
from jitguard.findings.catalog import make
from jitguard.findings.checks_jitguard import unit
from jitguard.findings.model import Finding

if TYPE_CHECKING:
    from jitguard.facts import Facts
    from jitguard.facts.packages import PackageFacts

FLA_MINIMUM = "0.6.0"
# CUDA flavours flashinfer-jit-cache is published for (https://flashinfer.ai/whl/<tag>).
JIT_CACHE_TAGS = ("cu128", "cu129", "cu130")


def check(facts: Facts, backend: str) -> list[Finding]:
    if backend == "flashinfer":
        # Its own unit: an unknown RECORD check is one fact-unavailable, never the loss of the others.
        return (
            unit(backend, lambda: _flashinfer(facts))
            + unit(backend, lambda: dsl_checks.install(facts))
            + unit(backend, lambda: dsl_checks.importable(facts))
        )
    if backend == "triton":
        return unit(backend, lambda: _triton(facts.packages))
    if backend == "torch":
        return unit(backend, lambda: _torch(facts.packages, "torch"))
    return []


def import_findings(
    probe: ImportProbe,
    *,
    version: str | None = None,
    backend: str = "flashinfer",
    context: str = "",
    repair: tuple[str, str] | None = None,
) -> list[Finding]:
    """``flashinfer-import-broken`` from a ``probe_import`` result (GDN resolver, ``doctor --deep``).
    ``repair``: (sentence, command) of a first fix the caller knows for this cause (e.g. the DSL's)."""
    if probe.ok:
        return []
    first: dict[str, Any] = {"repair": repair[0], "repair_command": repair[1]} if repair else {}
    evidence = [f"import {probe.module}: {probe.error_type}: {probe.error_message}"]
    if probe.traceback_tail:
        evidence += probe.traceback_tail.splitlines()[-6:]
    return [
        make(
            "flashinfer-import-broken",
            backend=backend,
            evidence=evidence,
            module=probe.module,
            error_type=probe.error_type,
            error_message=probe.error_message,
            version=version or "<version>",
            context=context or _import_context(probe),
            **first,
        )
    ]


def _import_context(probe: ImportProbe) -> str:
    if "not compiled with CUDA" in (probe.error_message or ""):
        # FlashInfer >= 0.6.14 queries the GPU while importing; a CPU-only torch fails there, not the install.
        return (
            "This torch is a CPU-only build and FlashInfer queries the GPU while importing: install a CUDA "
            "build of torch (see torch-no-cuda); reinstalling FlashInfer will not help."
        )
    return "Anything that imports it (vLLM's FlashInfer GDN path included) fails the same way."


def cuda_tag(facts: Facts) -> str:
    """The flashinfer-jit-cache index to install from: torch's CUDA when known (the modules link against the
    CUDA runtime torch brings), else the newest the driver supports, else cu129."""
    torch_cuda = facts.packages.torch_cuda
    if torch_cuda:
        tag = "cu" + torch_cuda.replace(".", "")
        if tag in JIT_CACHE_TAGS:
            return tag
    driver = getattr(facts.gpu, "cuda_driver_version", None)
    if driver:
        try:
            supported = [t for t in JIT_CACHE_TAGS if Version(f"{t[2:-1]}.{t[-1]}") <= Version(driver)]
        except InvalidVersion:
            supported = []
        if supported:
            return supported[-1]
    return "cu129"


def jit_cache_install_command(facts: Facts) -> str:
    version = facts.flashinfer.version or "<flashinfer version>"
    return (
        f"pip install flashinfer-jit-cache=={version} --index-url https://flashinfer.ai/whl/{cuda_tag(facts)}"
    )


def _torch(packages: PackageFacts, backend: str, *, unusable: tuple[str, ...] = ()) -> list[Finding]:
    """torch-missing, or torch-no-cuda when torch's build flavour (from its local tag) is in ``unusable``."""
    torch = packages.get("torch")
    if torch is None:
        return [
            make("torch-missing", backend=backend, evidence=["importlib.metadata: no 'torch' distribution"])
        ]
    if packages.torch_flavour in unusable:
        return [
            make(
                "torch-no-cuda",
                backend=backend,
                evidence=[f"torch {torch.version} (local tag '+{torch.local_tag}') at {torch.location}"],
                torch_version=torch.version,
                backend_label={"flashinfer": "FlashInfer backend", "triton": "Triton (FLA) backend"}.get(
                    backend, backend
                ),
                flavour={"cpu": "CPU-only", "rocm": "ROCm"}.get(packages.torch_flavour or "", "non-CUDA"),
            )
        ]
    return []


def _flashinfer(facts: Facts) -> list[Finding]:
    packages, fi = facts.packages, facts.flashinfer
    found = _torch(packages, "flashinfer", unusable=("cpu", "rocm"))
    if fi.era == ERA_NONE:
        return [
            *found,
            make(
                "flashinfer-missing",
                backend="flashinfer",
                evidence=["importlib.metadata: no 'flashinfer-python' distribution"],
            ),
        ]
    if fi.era == ERA_TOO_OLD:
        return [
            *found,
            make(
                "flashinfer-too-old",
                backend="flashinfer",
                version=fi.version,
                evidence=[f"flashinfer-python {fi.version}"],
            ),
        ]
    found += _companions(facts, fi)
    if fi.era == ERA_CUTEDSL:
        found += _cutlass_dsl(fi)
        found.append(
            make(
                "flashinfer-cutedsl-compiles-per-process",
                backend="flashinfer",
                evidence=[f"flashinfer-python {fi.version} (CuTeDSL era: >= 0.6.14)"],
                version=fi.version,
            )
        )
    elif fi.era == ERA_NVCC and fi.prebuilt_gdn is not None:
        found.append(
            make(
                "gdn-prebuilt-available",
                backend="flashinfer",
                evidence=[f"{fi.prebuilt_gdn} ({fi.prebuilt_source})"],
                module=fi.gdn_module,
                path=fi.prebuilt_gdn,
                source=fi.prebuilt_source,
                tus=fi.gdn_tu_count,
            )
        )
    return found


def _companions(facts: Facts, fi: FlashinferFacts) -> list[Finding]:
    """flashinfer-jit-cache / flashinfer-cubin whose version FlashInfer rejects (or should)."""
    found = []
    pairs = (
        (
            "flashinfer-jit-cache",
            fi.jit_cache_version,
            fi.jit_cache_import_raises,
            fi.jit_cache_matches,
            " (prefix match: it carries a +cuXXX tag)",
            jit_cache_install_command(facts),
        ),
        (
            "flashinfer-cubin",
            fi.cubin_version,
            fi.cubin_import_raises,
            fi.cubin_version == fi.version if fi.cubin_version else None,
            " (exact match)",
            f"pip install flashinfer-cubin=={fi.version}",
        ),
    )
    for package, version, raises, matches, how, command in pairs:
        if version is None or (matches and not raises):
            continue
        if raises:
            consequence = (
                "here it does not, so `import flashinfer` raises RuntimeError and every FlashInfer kernel, "
                "not only GDN, is unavailable."
            )
            severity = None
        else:
            why = (
                "FLASHINFER_DISABLE_VERSION_CHECK is set"
                if fi.version_check_disabled
                else "FlashInfer's prefix comparison lets this version through"
            )
            consequence = (
                f"{why}, so FlashInfer loads prebuilt modules built for {package} {version} against "
                f"flashinfer-python {fi.version}'s headers and calling conventions: crashes or wrong results "
                "are possible."
            )
            severity = "warning"
        found.append(
            make(
                "jit-cache-mismatch",
                backend="flashinfer",
                severity=severity,  # type: ignore[arg-type]
                evidence=[f"{package} {version}", f"flashinfer-python {fi.version}"],
                package=package,
                package_version=version,
                version=fi.version,
                how=how,
                consequence=consequence,
                install_command=command,
            )
        )
    return found


def _cutlass_dsl(fi: FlashinferFacts) -> list[Finding]:
    requirement = fi.cutlass_dsl_requirement or ""
    if fi.cutlass_dsl_version is None:
        return [
            make(
                "cutlass-dsl-missing",
                backend="flashinfer",
                evidence=[
                    "importlib.metadata: no 'nvidia-cutlass-dsl' distribution",
                    f"flashinfer-python {fi.version} requires nvidia-cutlass-dsl{requirement}",
                ],
                version=fi.version,
                requirement=requirement,
            )
        ]
    if fi.cutlass_dsl_satisfied is False:
        return [
            make(
                "cutlass-dsl-too-old",
                backend="flashinfer",
                evidence=[
                    f"nvidia-cutlass-dsl {fi.cutlass_dsl_version}",
                    f"flashinfer-python {fi.version} requires nvidia-cutlass-dsl{requirement}",
                ],
                version=fi.version,
                dsl_version=fi.cutlass_dsl_version,
                requirement=requirement,
            )
        ]
    return []


def _triton(packages: PackageFacts) -> list[Finding]:
    found = _torch(packages, "triton", unusable=("cpu",))  # FLA also runs on ROCm
    fla = packages.get("fla-core")
    if fla is None:
        found.append(
            make("fla-missing", backend="triton", evidence=["importlib.metadata: no 'fla-core' distribution"])
        )
    else:
        try:
            too_old = Version(fla.version) < Version(FLA_MINIMUM)
        except InvalidVersion:
            too_old = False
        if too_old:
            found.append(
                make(
                    "fla-too-old",
                    backend="triton",
                    evidence=[f"fla-core {fla.version} at {fla.location}"],
                    fla_version=fla.version,
                    minimum=FLA_MINIMUM,
                )
            )
    if packages.get("triton") is None:
        found.append(
            make(
                "triton-missing", backend="triton", evidence=["importlib.metadata: no 'triton' distribution"]
            )
        )
    return found
