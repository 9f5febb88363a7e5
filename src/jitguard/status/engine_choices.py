"""The statuses of an engine's FlashInfer choices (``jitguard.decision.engine_verdicts`` is the pure half): this
process's facts, the failure cache and the prebuilt modules, turned into a status per choice. FlashInfer GDN
prefill's starts from the same pre-flight and failure record as the GDN op's FlashInfer backend
(``status.gdn_backends``), read here directly, never through the op's dispatcher."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from jitguard.decision.engine_verdicts import (
    BUILD_DOOM,
    CACHED_FAILURE,
    GDN_PREFILL,
    KERNELS,
    Choice,
    ChoiceStatus,
    assess,
    prefill_in_process,
)
from jitguard.decision.gdn_resolution import BackendStatus
from jitguard.facts.flashinfer_modules import cubin_kernels, prebuilt
from jitguard.findings.catalog import make
from jitguard.findings.checks import jit_preflight
from jitguard.findings.checks_arch import for_choice
from jitguard.findings.checks_packages import jit_cache_install_command
from jitguard.findings.checks_toolchain import check_built_library
from jitguard.findings.model import Finding
from jitguard.state.failure_cache import FailureCache, FailureRecord, ttl_from_env
from jitguard.state.module_names import GDN_OP_FLASHINFER
from jitguard.status.gdn_backends import FLASHINFER_GDN, BackendStatuses, guarded, record_finding

if TYPE_CHECKING:
    from jitguard.facts import Facts
    from jitguard.facts.flashinfer_modules import PrebuiltModule


def recorded_failures(facts: Facts, choice: Choice, cache_dir: Path) -> list[Finding]:
    """``flashinfer-cached-failure`` for each module of ``choice`` that failed to build or load in this same
    environment (the build hook records every FlashInfer module it saw fail, by FlashInfer's name)."""
    records = _failure_cache(cache_dir).failures(facts.fingerprint, prefixes=choice.modules)
    return [_engine_record(choice, record) for record in records]


def gdn_status(facts: Facts, cache_dir: Path) -> BackendStatus:
    """FlashInfer GDN prefill here: the pre-flight of the op's FlashInfer backend, its recorded failure and
    those of FlashInfer's own GDN modules (``gdn_prefill_sm90``, recorded by the build hook when a build in an
    engine failed), read from the failure cache at once. What every GDN choice (vLLM's GDN prefill, SGLang's
    phases) starts from."""
    backend = FLASHINFER_GDN
    statuses = BackendStatuses(facts=facts, cache_dir=cache_dir)

    def read() -> list[Finding]:
        records = _failure_cache(cache_dir).failures(
            facts.fingerprint, modules=(GDN_OP_FLASHINFER,), prefixes=GDN_PREFILL.modules
        )
        return [
            statuses.op_record(backend, record)
            if record.module == GDN_OP_FLASHINFER
            else _engine_record(GDN_PREFILL, record)
            for record in records
        ]

    return BackendStatus.of(
        backend.NAME, [*statuses.preflight(backend), *guarded(backend.NAME, backend.TITLE, read)]
    )


def _engine_record(choice: Choice, record: FailureRecord) -> Finding:
    return record_finding(CACHED_FAILURE, "flashinfer", choice.title, record)


def status_of(
    choice: Choice, facts: Facts, cache_dir: Path, *, gdn: BackendStatus | None = None
) -> ChoiceStatus:
    """``choice``'s status from ``facts``, the failure cache under ``cache_dir`` and the prebuilt modules. A
    GDN choice starts from ``gdn`` (default: ``gdn_status``)."""
    if choice.gdn:
        base = gdn if gdn is not None else gdn_status(facts, cache_dir)
        return assess(choice, base.findings, in_process=_in_process(facts))
    known = recorded_failures(facts, choice, cache_dir)
    fi = facts.flashinfer
    built = prebuilt(fi, choice.modules)
    for module in _first_per_prefix(built, choice.required):
        known.append(
            make(
                "flashinfer-module-prebuilt",
                backend="flashinfer",
                evidence=[str(module.path)],
                title=choice.title,
                module=module.name,
                path=module.path,
                source=module.source,
            )
        )
        known += check_built_library(module.path, facts.libstdcxx)
    jit_cache = bool(fi.jit_cache_version) and bool(fi.jit_cache_matches) and not fi.jit_cache_import_raises
    arch_build, arch_always = for_choice(facts, choice.key)  # the GPU arch x toolkit check, per module kind
    pre = [*jit_preflight(facts), *arch_build]
    if fi.cubin_dir is not None and not jit_cache and any(f.code in BUILD_DOOM for f in pre):
        known += _cubin_without_modules(facts)
    if choice is KERNELS and jit_cache:
        known += _vllm_gate_without_cubin(facts, pre)
    return assess(choice, pre, [*known, *arch_always], [m.name for m in built], jit_cache=jit_cache)


def _cubin_without_modules(facts: Facts) -> list[Finding]:
    """Why flashinfer-cubin does not make a choice work where its modules cannot be built: it holds kernel
    binaries, no module (``facts.flashinfer_modules.cubin_kernels``)."""
    fi = facts.flashinfer
    kernels = cubin_kernels(fi)
    launchers = sorted({m for _, m in kernels if m is not None})
    return [
        make(
            "flashinfer-cubin-no-modules",
            backend="flashinfer",
            evidence=[
                f"{fi.cubin_dir}: kernel families {', '.join(f for f, _ in kernels) or 'none'}",
                "no flashinfer-jit-cache of flashinfer-python's version: every module compiles on first use",
            ],
            cubin_version=fi.cubin_version,
            kernels=", ".join(f for f, _ in kernels) or "none found",
            launchers=", ".join(launchers) or "none",
            jit_cache_command=jit_cache_install_command(facts),
        )
    ]


def _vllm_gate_without_cubin(facts: Facts, pre: Sequence[Finding]) -> list[Finding]:
    """vLLM's has_flashinfer() wants nvcc and ninja, or flashinfer-cubin; a matching jit-cache it ignores. Where
    that turns FlashInfer's prebuilt kernels off, say so (jitguard never turns vLLM's False into True)."""
    fi = facts.flashinfer
    missing = [f.code.removesuffix("-missing") for f in pre if f.code in ("nvcc-missing", "ninja-missing")]
    if fi.cubin_version is not None or not missing:
        return []
    return [
        make(
            "vllm-gate-wants-cubin",
            backend="flashinfer",
            evidence=[f"{fi.jit_cache_dir}: flashinfer-jit-cache {fi.jit_cache_version}", *missing],
            missing=f"{' and '.join(missing)} cannot be found and flashinfer-cubin is not installed",
            jit_cache_version=fi.jit_cache_version,
            version=fi.version,
        )
    ]


def _in_process(facts: Facts) -> bool:
    try:
        return prefill_in_process(facts.flashinfer.era, {d.major for d in facts.gpu.devices})
    except Exception:  # a GPU fact that could not be collected: FlashInfer's usual path
        return False


def _first_per_prefix(built: Sequence[PrebuiltModule], prefixes: Sequence[str]) -> list[PrebuiltModule]:
    """One prebuilt module per required prefix: enough to check that what FlashInfer loads can load."""
    chosen: list[PrebuiltModule] = []
    for prefix in prefixes:
        match = next((m for m in built if m.name.startswith(prefix)), None)
        if match is not None and match not in chosen:
            chosen.append(match)
    return chosen


def _failure_cache(cache_dir: Path) -> FailureCache:
    return FailureCache(cache_dir, ttl=ttl_from_env())
