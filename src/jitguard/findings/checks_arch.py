"""The GPU-arch check: does the CUDA toolkit FlashInfer compiles with target every code target FlashInfer asks
it for, per kind of JIT module? -> ``nvcc-arch-unsupported``, with the fixes this machine offers.

Cases it exists for: an RTX 50xx / RTX PRO 6000 (sm_120) with CUDA before 12.9, where FlashInfer 0.6.7 - 0.7.0
refuses the GPU before nvcc runs and an explicit ``12.0f`` dies in nvcc (vLLM #50705); CUDA 13, whose nvcc
dropped sm_70/72; Blackwell (sm_100/103) with an nvcc older than 12.8/12.9. The targets come from
``facts.flashinfer_archs`` (FlashInfer's own rules), what nvcc accepts from ``nvcc --help``
(``facts.cuda_archs``). Pure: facts in, findings out.
"""

from __future__ import annotations

import contextlib
import os
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from jitguard.facts import FactUnavailable
from jitguard.facts.cuda_archs import Release, Target, can_target, parse, releases_for, targets_of
from jitguard.facts.flashinfer_archs import (
    KIND_FUSED_MOE,
    KIND_GDN,
    KIND_GLOBAL,
    KINDS,
    ArchPlan,
    jit_cache_wheel,
    normalise,
    plan,
    requested,
)
from jitguard.findings.catalog import make
from jitguard.findings.model import Finding

if TYPE_CHECKING:
    from jitguard.facts import Facts

CODE = "nvcc-arch-unsupported"
BACKEND = "flashinfer"
# nvcc before 12.6 cannot build the nvcc-era GDN module at all: `nvcc-too-old` says so, with its own fixes.
_GDN_FLOOR: Release = (12, 6)

_KIND_TEXT = {
    KIND_GLOBAL: "the sampler, attention (its FP8 KV cache too) and FlashInfer's other JIT modules",
    KIND_FUSED_MOE: "CUTLASS fused MoE",
    KIND_GDN: "GDN prefill",
}
# An engine's FlashInfer choice (decision.engine_verdicts.CHOICES) -> the module kind it builds, its name in a
# sentence, and the engine's own path (text, command).
CHOICE_KINDS: dict[str, tuple[str, str, tuple[str, str] | None]] = {
    "sampler": (
        KIND_GLOBAL,
        "the top-k/top-p sampler",
        ("vLLM's PyTorch sampler (same distribution)", "export VLLM_USE_FLASHINFER_SAMPLER=0"),
    ),
    "attention": (
        KIND_GLOBAL,
        "attention",
        ("vLLM's FlashAttention backend", "--attention-backend FLASH_ATTN"),
    ),
    "kv-cache": (
        KIND_GLOBAL,
        "attention with an FP8 KV cache",
        ("vLLM's FlashAttention backend", "--attention-backend FLASH_ATTN"),
    ),
    "moe": (
        KIND_FUSED_MOE,
        "CUTLASS fused MoE",
        (
            "vLLM's Triton fused MoE (drop --moe-backend flashinfer_* too)",
            "unset VLLM_USE_FLASHINFER_MOE_FP16 VLLM_USE_FLASHINFER_MOE_FP8 VLLM_USE_FLASHINFER_MOE_FP4",
        ),
    ),
    "flashinfer-ops": (KIND_GLOBAL, "FlashInfer's other JIT kernels", None),
    "gdn-prefill": (KIND_GDN, "GDN prefill", None),
}
_ANY_ENGINE = (
    "jitguard's vLLM and SGLang plugins take the engine's own path by themselves where it picked FlashInfer; "
    "where you named FlashInfer, drop that (vLLM's sampler shown)",
    "export VLLM_USE_FLASHINFER_SAMPLER=0",
)


@dataclass(frozen=True)
class ArchIssue:
    """One code target FlashInfer needs and cannot get here: ``kinds`` of module ask for it; ``refused`` is
    FlashInfer's own RuntimeError when it gives up on the GPU before nvcc runs."""

    target: Target
    kinds: tuple[str, ...]
    refused: str | None = None
    device: tuple[int, int] | None = None


def check(facts: Facts, backend: str) -> list[Finding]:
    """Pre-flight for ``backend``: one finding per target FlashInfer asks for that nvcc cannot produce, a
    warning unless GDN prefill's own module is among the affected (the other modules are the engines' choices,
    judged per choice by ``for_choice``)."""
    if backend != BACKEND:
        return []
    issues_found = issues(facts, KINDS)
    return [
        _finding(facts, issue, severity="error" if KIND_GDN in issue.kinds else "warning")
        for issue in issues_found
    ]


def for_choice(facts: Facts, choice: str) -> tuple[list[Finding], list[Finding]]:
    """The findings for an engine's FlashInfer ``choice`` (a ``decision.engine_verdicts`` key), split into (those a
    prebuilt module makes moot: nvcc is not run; those that stand anyway: FlashInfer refuses the GPU before it
    looks for a prebuilt module)."""
    known = CHOICE_KINDS.get(choice)
    if known is None:
        return [], []
    kind, title, engine = known
    build: list[Finding] = []
    always: list[Finding] = []
    for issue in issues(facts, (kind,)):
        finding = _finding(facts, issue, modules=title, engine=engine)
        (always if issue.refused else build).append(finding)
    return build, always


def issues(facts: Facts, kinds: Sequence[str]) -> list[ArchIssue]:
    """What FlashInfer's module ``kinds`` ask nvcc for here and nvcc cannot give ([] when something needed is
    unknown: no FlashInfer, no nvcc, no arch list and no GPU)."""
    try:
        fi, tc = facts.flashinfer, facts.toolchain
        if not fi.installed or not tc.nvcc.usable:
            return []
        devices = _devices(facts)
        current = _plan(facts, devices)
    except FactUnavailable:
        return []
    if current is None:
        return []
    if current.refusals:
        return _refusals(facts, current, devices, kinds)
    found: dict[Target, list[str]] = {}
    for kind in kinds:
        if kind == KIND_GDN and (fi.era != "nvcc" or (tc.nvcc_release or (0, 0)) < _GDN_FLOOR):
            continue
        for target in requested(current, kind, devices):
            if can_target(target, tc.nvcc_gpu_archs, tc.nvcc_release) is False:
                found.setdefault(target, []).append(kind)
    return [ArchIssue(t, tuple(k)) for t, k in sorted(found.items())]


def log_params(facts: Facts | None, arch: str | None) -> dict[str, Any]:
    """Template fields for ``nvcc-arch-unsupported`` found in a build log naming ``arch`` (nvcc's
    ``compute_70``, ``sm_120f``): the same fixes pre-flight gives, as far as the facts go."""
    target = parse(arch) if arch else None
    params: dict[str, Any] = {"modules": "a FlashInfer JIT module", "arch_source": "from the build log"}
    if target is not None:
        params.update(arch=target.compute, gencode=target.gencode)
    if facts is None or target is None:
        return params
    try:
        return {**params, **_params(facts, ArchIssue(target, (KIND_GLOBAL,)), engine=_ANY_ENGINE)}
    except FactUnavailable:
        return params


def _refusals(
    facts: Facts, current: ArchPlan, devices: Sequence[tuple[int, int]], kinds: Sequence[str]
) -> list[ArchIssue]:
    """FlashInfer gave up on a capability (CUDA too old for its normalised target): every module kind that
    builds anything fails, so one issue per refused capability."""
    fi = facts.flashinfer
    wanted = [k for k in kinds if k != KIND_GDN]
    if not wanted:
        return []
    caps = list(devices) or [
        (int(a.split(".")[0]), int(a.split(".")[1])) for a in fi.arch_list if a.split(".")[1].isdigit()
    ]
    found = []
    for major, minor in caps:
        target, refused = normalise(fi.version, major, minor, facts.toolchain.nvcc_release)
        if refused and target is None:
            wanted_target, _ = normalise(fi.version, major, minor, None)
            if wanted_target is not None:
                found.append(ArchIssue(wanted_target, tuple(wanted), refused, (major, minor)))
    return found


def _finding(
    facts: Facts,
    issue: ArchIssue,
    *,
    severity: str | None = None,
    modules: str | None = None,
    engine: tuple[str, str] | None = _ANY_ENGINE,
) -> Finding:
    params = _params(facts, issue, engine=engine)
    if modules is not None:
        params["modules"] = modules
    return make(CODE, backend=BACKEND, evidence=_evidence(facts, issue), severity=severity, **params)  # type: ignore[arg-type]


def _params(facts: Facts, issue: ArchIssue, *, engine: tuple[str, str] | None) -> dict[str, Any]:
    fi, tc = facts.flashinfer, facts.toolchain
    target = issue.target
    rng = releases_for(target)
    params: dict[str, Any] = {
        "arch": target.compute,
        "gencode": target.gencode,
        "fi_version": fi.version or "?",
        "modules": " and ".join(_KIND_TEXT[k] for k in issue.kinds),
        "arch_source": _source_text(facts, issue),
        "nvcc": shlex.join(tc.nvcc.command),
        "reason": _reason(facts, issue),
    }
    # Below sm75 FlashInfer refuses a list with nothing newer whatever the toolkit: no toolkit fix then.
    hopeless = target < Target(7, 5) and not _plan_eligible(facts)
    if rng is not None and not hopeless:
        toolkit = rng.last or rng.first
        params.update(
            needs=rng.text, toolkit=f"{toolkit[0]}.{toolkit[1]}", toolkit_dash=f"{toolkit[0]}-{toolkit[1]}"
        )
        home = _home_for(facts, rng)
        if home is not None:
            params.update(found_home=shlex.quote(home[0]), found_version=home[1])
    if engine is not None:
        params.update(engine_path=engine[0], engine_command=engine[1])
    params.update(_drop_params(facts, target))
    params.update(_alt_params(facts, issue))
    if issue.refused is None:
        params.update(_wheel_params(facts, issue))
    return params


def _reason(facts: Facts, issue: ArchIssue) -> str:
    tc = facts.toolchain
    release = _release_text(tc.nvcc_release)
    if issue.refused is not None:
        major, minor = issue.device or (issue.target.major, issue.target.minor)
        return (
            f"It compiles with CUDA {release} (`{shlex.join(tc.nvcc.command)}`), and for capability "
            f"{major}.{minor} it refuses that release before nvcc runs (`RuntimeError: {issue.refused}`), "
            "leaving no target at all: every JIT module then fails with 'FlashInfer requires GPUs with sm75 or "
            "higher' (and a FLASHINFER_CUDA_ARCH_LIST entry without a suffix makes `import flashinfer` raise)."
        )
    accepted = [t.compute for t in targets_of(tc.nvcc_gpu_archs)]
    listed = f"accepts {_span(accepted)}" if accepted else "is known by its release to lack it"
    text = (
        f"`{shlex.join(tc.nvcc.command)}` is CUDA {release}, whose nvcc {listed}: not {issue.target.compute}."
    )
    if issue.target < Target(7, 5) and not _plan_eligible(facts):
        text += " FlashInfer itself builds nothing for a list without sm75 or newer."
    return text


def _evidence(facts: Facts, issue: ArchIssue) -> list[str]:
    tc, fi = facts.toolchain, facts.flashinfer
    lines = [
        f"FlashInfer {fi.version} ({fi.era} era) targets: {_source_text(facts, issue)}",
        f"asks nvcc for: {issue.target.gencode} (building {' and '.join(_KIND_TEXT[k] for k in issue.kinds)})",
        f"nvcc: {tc.nvcc.path} ({tc.nvcc.banner or tc.nvcc.version})",
    ]
    if issue.refused:
        lines.append(f"FlashInfer raises: RuntimeError: {issue.refused}")
    accepted = [t.compute for t in targets_of(tc.nvcc_gpu_archs)]
    if accepted:
        lines.append(f"nvcc --help accepts: {' '.join(accepted)}")
    else:
        lines.append(f"nvcc's list could not be read; CUDA {_release_text(tc.nvcc_release)}'s table used")
    return lines


def _source_text(facts: Facts, issue: ArchIssue) -> str:
    fi = facts.flashinfer
    if fi.arch_source == "FLASHINFER_CUDA_ARCH_LIST":
        return f"FLASHINFER_CUDA_ARCH_LIST='{' '.join(fi.arch_list)}'"
    names: dict[tuple[int | None, int | None], str] = {}
    with contextlib.suppress(FactUnavailable):
        names = {(d.major, d.minor): d.name for d in facts.gpu.devices}
    device = issue.device or (issue.target.major, issue.target.minor)
    name = names.get(device)
    return f"the GPU here{f' ({name})' if name else ''}, capability {device[0]}.{device[1]}"


def _drop_params(facts: Facts, target: Target) -> dict[str, Any]:
    """An entry below sm75 in FLASHINFER_CUDA_ARCH_LIST beside usable ones: leave it out."""
    fi = facts.flashinfer
    if fi.arch_source != "FLASHINFER_CUDA_ARCH_LIST" or not target < Target(7, 5):
        return {}
    kept = [a for a in fi.arch_list if (t := _spelled(a)) is not None and not t < Target(7, 5)]
    if not kept:
        return {}
    return {"dropped": target.spelling, "kept_list": " ".join(kept)}


def _alt_params(facts: Facts, issue: ArchIssue) -> dict[str, Any]:
    """Another spelling for the same GPU that this nvcc can build (``12.0a`` where ``12.0f`` is out of reach),
    named explicitly so that FlashInfer takes it as written."""
    target, tc, fi = issue.target, facts.toolchain, facts.flashinfer
    if target < Target(7, 5):
        return {}
    major, minor = issue.device or (target.major, target.minor)
    for suffix in (
        "f",
        "a",
    ):  # a plain entry is normalised again from 0.6.7: only a suffix is taken as written
        alt = Target(major, minor, suffix)
        if alt == target or can_target(alt, tc.nvcc_gpu_archs, tc.nvcc_release) is not True:
            continue
        if fi.arch_source == "FLASHINFER_CUDA_ARCH_LIST":
            items = [
                alt.spelling if _spelled(a) in (target, Target(major, minor)) else a for a in fi.arch_list
            ]
        else:
            items = [alt.spelling]
        return {"alt_arch": alt.compute, "alt_list": " ".join(dict.fromkeys(items))}
    return {}


def _wheel_params(facts: Facts, issue: ArchIssue) -> dict[str, Any]:
    fi = facts.flashinfer
    device = issue.device or (issue.target.major, issue.target.minor)
    runtime = _release_of(getattr(facts.packages, "torch_cuda", None)) or facts.toolchain.nvcc_release
    wheel = jit_cache_wheel(fi.version, device, runtime, os.uname().machine)
    if wheel is None:
        return {}
    return {
        "wheel_cuda": f"{wheel.cuda[0]}.{wheel.cuda[1]}",
        "wheel_arch": wheel.target.sm,
        "wheel_command": wheel.command,
    }


def _home_for(facts: Facts, rng: Any) -> tuple[str, str] | None:
    """A CUDA toolkit on this machine, other than the one in use, whose release can target the arch."""
    tc = facts.toolchain
    current = os.path.realpath(tc.cuda_home) if tc.cuda_home else None
    for home in tc.cuda_homes:
        release = _release_of(home.version)
        if home.has_nvcc and release and rng.contains(release) and os.path.realpath(home.path) != current:
            return home.path, home.version or "?"
    return None


def _devices(facts: Facts) -> tuple[tuple[int, int], ...]:
    try:
        return facts.gpu.capability_pairs()
    except FactUnavailable:
        return ()


def _plan(facts: Facts, devices: Sequence[tuple[int, int]]) -> ArchPlan | None:
    fi = facts.flashinfer
    arch_list = " ".join(fi.arch_list) if fi.arch_source == "FLASHINFER_CUDA_ARCH_LIST" else None
    return plan(fi.version, arch_list, devices, facts.toolchain.nvcc_release)


def _plan_eligible(facts: Facts) -> bool:
    current = _plan(facts, _devices(facts))
    return current is not None and current.eligible


def _spelled(text: str) -> Target | None:
    return parse(text)


def _release_of(text: str | None) -> Release | None:
    if not text:
        return None
    parts = text.split(".")
    try:
        return (int(parts[0]), int(parts[1]) if len(parts) > 1 else 0)
    except ValueError:
        return None


def _release_text(release: Release | None) -> str:
    return f"{release[0]}.{release[1]}" if release else "(unknown)"


def _span(codes: Sequence[str]) -> str:
    return f"{codes[0]} ... {codes[-1]} ({len(codes)} targets)" if len(codes) > 4 else ", ".join(codes)
