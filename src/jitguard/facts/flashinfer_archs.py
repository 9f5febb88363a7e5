"""Which code targets FlashInfer asks nvcc for, per release and per kind of JIT module, and which prebuilt
flashinfer-jit-cache wheel holds a module for a GPU instead. Pure: re-derived from FlashInfer's code, never
imported.

One target list per process (``FLASHINFER_CUDA_ARCH_LIST``, else the visible GPUs), normalised by release
(suffixes ``a`` and ``f``, a refusal below CUDA 12.9 for 12.x); most modules get the whole list, a module with
``-gencode`` flags of its own only those (GDN prefill and SM90 fused MoE: ``sm_90a``), and Blackwell fused
MoE the list filtered by its supported majors. The rules per release are in the functions below.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from packaging.version import InvalidVersion, Version

from jitguard.facts.cuda_archs import Release, Target, parse

KIND_GLOBAL = "global"  # sampler, attention (FA2, FP8 KV cache), norm, rope, the other kernels
KIND_FUSED_MOE = "fused-moe"  # CUTLASS fused MoE, one module per GPU family
KIND_GDN = "gdn"  # nvcc-era GDN prefill (0.6.2 - 0.6.13)
KINDS = (KIND_GLOBAL, KIND_FUSED_MOE, KIND_GDN)

_SM90A = Target(9, 0, "a")
_SM89 = Target(8, 9)


@dataclass(frozen=True)
class ArchPlan:
    """FlashInfer's target list in this process: ``targets`` (its TARGET_CUDA_ARCHS), where they came from,
    and ``refusals``: the RuntimeError messages FlashInfer raises instead of adding a target."""

    targets: tuple[Target, ...]
    source: str  # "FLASHINFER_CUDA_ARCH_LIST" or "GPU"
    refusals: tuple[str, ...] = ()
    # How the list was derived: "verbatim" (<= 0.6.6), "normalised" (0.6.7+)
    scheme: str = "verbatim"

    @property
    def eligible(self) -> bool:
        """FlashInfer's check_cuda_arch: some target is sm75 or newer (an empty list never is)."""
        return any(t.major >= 8 or (t.major == 7 and not t.suffix and t.minor >= 5) for t in self.targets)


def _release(version: str | None) -> tuple[int, ...] | None:
    if not version:
        return None
    try:
        return (*Version(version).release, 0, 0, 0)[:3]
    except InvalidVersion:
        return None


def normalise(
    version: str | None, major: int, minor: int, cuda: Release | None
) -> tuple[Target | None, str | None]:
    """The target FlashInfer ``version`` derives from capability major.minor with CUDA ``cuda`` (None: the
    release is unknown, taken as new enough), or its RuntimeError message."""
    release = _release(version) or (0, 0, 0)
    if release < (0, 6, 7):
        return Target(major, minor, "a" if major >= 9 else ""), None

    def at_least(needed: Release) -> bool:
        return cuda is None or cuda >= needed

    if major == 12:
        if release < (0, 6, 8):
            return (
                (Target(12, 0, "f"), None) if at_least((12, 9)) else (None, "SM 12.x requires CUDA >= 12.9")
            )
        if release < (0, 7, 1):
            if not at_least((12, 9)):
                return None, "SM 12.x requires CUDA >= 12.9"
            return Target(12, minor, "f" if minor == 0 else "a"), None
        if minor == 0:
            if at_least((12, 9)):
                return Target(12, 0, "f"), None
            if at_least((12, 8)):
                return Target(12, 0, "a"), None
            return None, "SM 120 requires CUDA >= 12.8"
        return (
            (Target(12, minor, "a"), None) if at_least((12, 9)) else (None, "SM 12.1+ requires CUDA >= 12.9")
        )
    return Target(major, minor, "a" if major >= 9 else ""), None


def plan(
    version: str | None,
    arch_list: str | None,
    capabilities: Sequence[tuple[int, int]],
    cuda: Release | None,
) -> ArchPlan | None:
    """FlashInfer ``version``'s target list from FLASHINFER_CUDA_ARCH_LIST (``arch_list``, None when unset)
    or the GPUs' capabilities; None when neither is known or the list does not parse (FlashInfer's import
    fails on it: ``arch-list-invalid`` says so)."""
    scheme = "verbatim" if (_release(version) or (0, 0, 0)) < (0, 6, 7) else "normalised"
    targets: set[Target] = set()
    refusals: list[str] = []
    if arch_list is not None:
        for item in arch_list.split(" "):
            major, dot, minor = item.partition(".")
            if not dot or not major.isdigit() or not minor:
                return None
            if scheme == "verbatim" or minor[-1].isalpha():
                target = parse(item)
                if target is None:
                    return None
                targets.add(target)
                continue
            if not minor.isdigit():
                return None
            found, refused = normalise(version, int(major), int(minor), cuda)
            if refused:
                refusals.append(refused)
            elif found:
                targets.add(found)
        return ArchPlan(tuple(sorted(targets)), "FLASHINFER_CUDA_ARCH_LIST", tuple(refusals), scheme)
    if not capabilities:
        return None
    for cap_major, cap_minor in capabilities:
        found, refused = normalise(version, cap_major, cap_minor, cuda)
        if refused:
            refusals.append(refused)
        elif found:
            targets.add(found)
    if refusals:
        # FlashInfer swallows the refusal during the GPU query and keeps an empty list (one try block).
        targets = set()
    return ArchPlan(tuple(sorted(targets)), "GPU", tuple(dict.fromkeys(refusals)), scheme)


def fused_moe_targets(plan: ArchPlan, major: int, minor: int) -> tuple[Target, ...]:
    """The targets FlashInfer's CUTLASS fused-MoE module for a GPU of major.minor asks nvcc for (empty: there
    is no such module for that GPU, or the list holds none of its family)."""
    if major == 12:
        families: tuple[int, ...] = (12,)
    elif (major, minor) == (10, 3):
        families = (10,)
    elif (major, minor) in ((10, 0), (11, 0)):
        families = (10, 11)
    elif (major, minor) == (9, 0):
        return (_SM90A,)
    elif (major, minor) == (8, 9):
        return (_SM89,)
    else:
        return ()
    return tuple(t for t in plan.targets if t.major in families)


def requested(plan: ArchPlan, kind: str, capabilities: Sequence[tuple[int, int]]) -> tuple[Target, ...]:
    """The targets a module of ``kind`` asks nvcc for. Without GPUs, fused MoE is taken for every family the
    list names (one module per family would be built)."""
    if kind == KIND_GDN:
        return (_SM90A,)
    if kind == KIND_FUSED_MOE:
        devices = tuple(capabilities) or tuple(dict.fromkeys((t.major, t.minor) for t in plan.targets))
        found: dict[Target, None] = {}
        for major, minor in devices:
            found.update(dict.fromkeys(fused_moe_targets(plan, major, minor)))
        return tuple(sorted(found))
    return plan.targets


# flashinfer-jit-cache: one wheel per CUDA label (``<version>+cu129`` on https://flashinfer.ai/whl/cu129),
# built for these FLASHINFER_CUDA_ARCH_LIST values (FlashInfer's release workflow, x86_64 / aarch64). From 0.7.0
# it is a shim plus one provider wheel per target, ``flashinfer-jit-cache-sm120f`` (``python -m flashinfer
# download-kernels --sm``); the shim pins every provider.
_BASE = "7.5 8.0 8.9 9.0a 10.0a"
_WHEELS_0_6 = (  # 0.6.x up to 0.6.17 (release.yml: cuda 12.8, 12.9, 13.0)
    ("cu128", (12, 8), f"{_BASE} 12.0a", f"{_BASE} 12.0a"),
    ("cu129", (12, 9), f"{_BASE} 10.3a 12.0f", f"{_BASE} 10.3a 12.0f"),
    ("cu130", (13, 0), f"{_BASE} 10.3a 12.0f", f"{_BASE} 10.3a 11.0a 12.0f"),
)
_WHEELS_LATER = (  # 0.6.18 and 0.7.x (ci/cuda-versions.json, and the CLI's supported labels)
    ("cu129", (12, 9), f"{_BASE} 10.3a 12.0f", f"{_BASE} 10.3a 12.0f"),
    ("cu130", (13, 0), f"{_BASE} 10.3a 12.0f", f"{_BASE} 10.3a 11.0a 12.0f 12.1a"),
    ("cu134", (13, 4), f"{_BASE} 10.3a 10.7a 12.0f", f"{_BASE} 10.3a 10.7a 11.0a 12.0f 12.1a"),
)
INDEX_URL = "https://flashinfer.ai/whl/{label}"


@dataclass(frozen=True)
class JitCacheWheel:
    label: str  # "cu129"
    cuda: Release
    packages: tuple[str, ...]  # pip requirements, e.g. ("flashinfer-jit-cache==0.7.4+cu129", ...)
    target: Target  # the prebuilt target that runs on the GPU

    @property
    def index_url(self) -> str:
        return INDEX_URL.format(label=self.label)

    @property
    def command(self) -> str:
        return f"pip install --no-deps --index-url {self.index_url} " + " ".join(
            f"'{p}'" for p in self.packages
        )


def jit_cache_wheel(
    version: str | None, device: tuple[int, int], runtime_cuda: Release | None, machine: str = "x86_64"
) -> JitCacheWheel | None:
    """The flashinfer-jit-cache wheel for FlashInfer ``version`` whose modules run on a GPU of capability
    ``device``, built for the newest CUDA of ``runtime_cuda``'s major not newer than it (FlashInfer's own
    choice in ``download-kernels``); None when no published wheel fits."""
    release = _release(version)
    if release is None or release < (0, 6, 0) or runtime_cuda is None:
        return None
    public = Version(version or "").public
    table = _WHEELS_0_6 if release < (0, 6, 18) else _WHEELS_LATER
    fitting = [w for w in table if w[1][0] == runtime_cuda[0] and w[1] <= runtime_cuda]
    if not fitting:
        return None
    label, cuda, x86, arm = max(fitting, key=lambda w: w[1])
    listed = [t for t in (parse(s) for s in (arm if machine in ("aarch64", "arm64") else x86).split()) if t]
    runnable = [t for t in listed if t.runs_on(*device)]
    if not runnable:
        return None
    best = max(
        runnable, key=lambda t: ((t.major, t.minor) == device, t.suffix == "a", t.suffix == "f", t.minor)
    )
    shim = f"flashinfer-jit-cache=={public}+{label}"
    if release < (0, 7, 0):
        return JitCacheWheel(label, cuda, (shim,), best)
    provider = f"flashinfer-jit-cache-sm{best.number}{best.suffix}=={public}+{label}"
    return JitCacheWheel(label, cuda, (shim, provider), best)
