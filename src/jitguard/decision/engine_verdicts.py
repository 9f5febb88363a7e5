"""The FlashInfer JIT paths an inference engine chooses on its own, and what jitguard answers for each: the
one choice core of every engine plugin (vLLM's table ``CHOICES`` here, SGLang's phases in ``decision.sglang_phases``).

A choice whose modules cannot be built or loaded here keeps the engine's own path with one warning when the
engine picked it, and stops start-up clearly when the user named it (``assess``, ``verdict``). Unknown is not
doomed: only positive evidence changes what the engine does (docs/failsafe.md). Pure: findings in, a verdict out.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from jitguard.decision.gdn_resolution import UNVERIFIED
from jitguard.errors import BackendUnavailable
from jitguard.facts.flashinfer import ERA_NVCC
from jitguard.findings.checks import JIT_BUILD_DOOM
from jitguard.findings.model import Finding, sort_findings

CACHED_FAILURE = "flashinfer-cached-failure"
BUILD_DOOM = JIT_BUILD_DOOM  # findings that doom building a FlashInfer nvcc JIT module here
# Findings that doom using any FlashInfer module, built or prebuilt.
LOAD_DOOM = frozenset(
    {"flashinfer-import-broken", "jit-cache-mismatch", "so-glibcxx-missing", CACHED_FAILURE}
)

# Findings that stop every FlashInfer GDN kernel, the in-process CuTeDSL ones included (no nvcc, no link):
# all that decides a kernel FlashInfer compiles in the process (SGLang's decode and verify).
KERNEL_WIDE = frozenset(
    {
        "gpu-none",
        "torch-missing",
        "torch-no-cuda",
        "flashinfer-missing",
        "flashinfer-too-old",
        "flashinfer-import-broken",
        "jit-cache-mismatch",
        "cutlass-dsl-missing",
        "cutlass-dsl-too-old",
        "cutlass-dsl-install-damaged",  # every CuTeDSL kernel runs on the mixed files, decode's too
        "cutlass-dsl-off-path",  # every CuTeDSL kernel imports cutlass, decode's too
        "cutlass-dsl-shadowed",
    }
)
# Codes that say "it failed before" without saying why: a one-line message names a classified cause first.
RECORDED = frozenset({CACHED_FAILURE, "gdn-cached-failure"})

Action = Literal["keep", "fallback", "refuse"]


def primary_of(findings: Sequence[Finding]) -> Finding | None:
    """The finding a one-line message names: the first blocking one (findings come most severe first), a
    classified cause before a recorded failure; None when nothing blocks."""
    blocking = [f for f in findings if f.blocking]
    return next((f for f in blocking if f.code not in RECORDED), blocking[0] if blocking else None)


@dataclass(frozen=True)
class Choice:
    """One place where an engine may pick a FlashInfer JIT path.

    ``modules``: FlashInfer module-name prefixes its first use builds (a module is named after its variant);
    ``needs``: the prefixes that must all be prebuilt for nothing to compile (default: all of ``modules``);
    ``any_of``: an umbrella gate over kernels the engine picks one by one (vLLM's ``has_flashinfer()``):
    answering "no" turns off every one of them, so one prebuilt module that loads is enough to keep it.
    ``gdn``: the verdict starts from the GDN op's own status (``jitguard.gdn``) and the recorded failures of
    FlashInfer's GDN modules; ``decided_by``: the only codes that decide it (None: every finding), and
    ``in_process_decided_by`` the same where FlashInfer runs it in-process here (an nvcc-era FlashInfer's
    CuTeDSL Blackwell prefill). ``stakes``: what a refusal at start-up spares the user."""

    key: str
    title: str
    modules: tuple[str, ...]
    default: str  # when the engine picks it on its own
    named_by: str | None  # how a user asks for it by name; None: it cannot be named on its own
    fallback: str  # the engine's own path without it
    needs: tuple[str, ...] = ()
    gdn: bool = False
    decided_by: frozenset[str] | None = None
    in_process_decided_by: frozenset[str] | None = None
    stakes: str = "building it and failing later"
    any_of: bool = False

    @property
    def required(self) -> tuple[str, ...]:
        return self.needs or self.modules

    def to_json(self) -> dict[str, Any]:
        return {
            "choice": self.key,  # not "key": the JSON envelope redacts any field named like a secret
            "title": self.title,
            "modules": list(self.modules),
            "default": self.default,
            "named_by": self.named_by,
            "fallback": self.fallback,
        }


_ATTENTION_MODULES = (
    "batch_prefill",
    "batch_decode",
    "single_prefill",
    "single_decode",
    "batch_attention",
    "pod",
    "cascade",
    "page",
    "fmha",  # fmha_gen (TRT-LLM-gen, its kernels from flashinfer-cubin), fmha_cutlass, fmha_cudnn_gen
    "xqa",
)

GDN_PREFILL = Choice(
    "gdn-prefill",
    "FlashInfer GDN prefill",
    ("gdn_prefill",),
    default="Qwen3.5 / Qwen3-Next on Hopper (SM90), --gdn-prefill-backend auto",
    named_by="--gdn-prefill-backend flashinfer",
    fallback="Triton/FLA (same results, slower prefill)",
    gdn=True,
    stakes="building for up to an hour and failing, or hanging, later",
)
SAMPLER = Choice(
    "sampler",
    "FlashInfer top-k/top-p sampler",
    ("sampling", "topk"),  # 0.7's sampler also takes its radix top-k from the topk module
    default=(
        "every CUDA GPU FlashInfer supports, from vLLM 0.21 (VLLM_USE_FLASHINFER_SAMPLER defaults on; "
        "0.17-0.20 only when it is set to 1)"
    ),
    named_by="VLLM_USE_FLASHINFER_SAMPLER=1",
    fallback="the PyTorch-native sampler (same distribution)",
    needs=("sampling",),
)
ATTENTION = Choice(
    "attention",
    "FlashInfer attention",
    _ATTENTION_MODULES,
    default="Blackwell (SM100) first in vLLM's priority list; elsewhere when FlashAttention cannot serve",
    named_by="--attention-backend FLASHINFER (or VLLM_ATTENTION_BACKEND=FLASHINFER)",
    fallback="the next valid backend in its priority list (FlashAttention, Triton, FlexAttention)",
    needs=("batch_prefill", "batch_decode"),
)
KV_CACHE = Choice(
    "kv-cache",
    "FlashInfer attention with an FP8 KV cache",
    _ATTENTION_MODULES,
    default="--kv-cache-dtype fp8* where FlashInfer is the attention backend vLLM picks",
    named_by="--attention-backend FLASHINFER with --kv-cache-dtype fp8",
    fallback="the next valid backend for the FP8 KV cache in its priority list",
    needs=("batch_prefill", "batch_decode"),
)
MOE = Choice(
    "moe",
    "FlashInfer fused MoE (CUTLASS / TRT-LLM)",
    ("fused_moe", "moe_utils"),
    default=(
        "unquantized MoE on every CUDA GPU in vLLM 0.20-0.22, Hopper included (0.17-0.19: only with "
        "VLLM_USE_FLASHINFER_MOE_FP16=1; 0.23+: not on Hopper); quantized (FP8/FP4) MoE on Blackwell"
    ),
    named_by="--moe-backend flashinfer_* (or VLLM_USE_FLASHINFER_MOE_*=1)",
    fallback="its Triton fused MoE",
    needs=("fused_moe",),
)
KERNELS = Choice(
    "flashinfer-ops",
    "FlashInfer's other JIT kernels",
    (  # the module names of flashinfer-jit-cache 0.6.6 (tests/data/flashinfer-wheels) these kernels use
        "comm",
        "trtllm_comm",
        "trtllm_mnnvl",
        "vllm_comm",
        "gemm",
        "trtllm_gemm",
        "trtllm_low_latency_gemm",
        "bf16_gemm",
        "tgv_gemm",
        "fp8",
        "fp4",
        "mxfp8",
        "norm",
        "rope",
        "silu_and_mul",
        "gelu",
        "quantization",
        "topk",
    ),
    default="all-reduce fusion (TP > 1 on Hopper/Blackwell), FP8/FP4 GEMMs, FlashInfer autotuning",
    named_by=None,  # vLLM only asks has_flashinfer()
    fallback="its own kernels, as on a host without FlashInfer's JIT",
    any_of=True,
)
CHOICES: tuple[Choice, ...] = (GDN_PREFILL, SAMPLER, ATTENTION, KV_CACHE, MOE, KERNELS)
BY_KEY = {c.key: c for c in CHOICES}


@dataclass(frozen=True)
class ChoiceStatus:
    """Can ``choice``'s FlashInfer modules be built (or are they prebuilt) and loaded here? ``findings`` are
    the ones about it, most severe first; ``prebuilt`` the modules found built."""

    choice: Choice
    usable: bool
    findings: tuple[Finding, ...] = ()
    prebuilt: tuple[str, ...] = ()

    @property
    def verified(self) -> bool:
        return not any(f.code == UNVERIFIED for f in self.findings)

    @property
    def blocking(self) -> tuple[Finding, ...]:
        return tuple(f for f in self.findings if f.blocking)

    @property
    def primary(self) -> Finding | None:
        return primary_of(self.findings)

    def to_json(self) -> dict[str, Any]:
        return {
            "usable": self.usable,
            "verified": self.verified,
            "prebuilt": list(self.prebuilt),
            "findings": [f.to_json() for f in self.findings],
        }


def assess(
    choice: Choice,
    preflight: Sequence[Finding],
    known: Sequence[Finding] = (),
    prebuilt: Sequence[str] = (),
    *,
    jit_cache: bool = False,
    in_process: bool = False,
) -> ChoiceStatus:
    """The status of ``choice`` from the pre-flight findings (``findings.checks.jit_preflight``; for a GDN
    choice the GDN op's own status), the findings about its modules themselves (``known``: recorded
    failures, the load check of a prebuilt module) and the names of its prebuilt modules. ``jit_cache``: a
    matching flashinfer-jit-cache is installed, so every module is prebuilt; ``in_process``: FlashInfer runs
    this GDN prefill in-process here (``prefill_in_process``)."""
    if choice.gdn:
        scope = choice.decided_by
        if in_process and choice.in_process_decided_by is not None:
            scope = choice.in_process_decided_by
        kept = [f for f in [*preflight, *known] if scope is None or f.code in scope]
        known = ()
    else:
        found = [any(m.startswith(p) for m in prebuilt) for p in choice.required]
        built = jit_cache or (any(found) if choice.any_of else all(found))
        doomed = LOAD_DOOM if built else BUILD_DOOM | LOAD_DOOM
        kept = [f for f in preflight if f.code in doomed or f.code == UNVERIFIED]
    findings = tuple(sort_findings([*kept, *known]))
    return ChoiceStatus(choice, not any(f.blocking for f in findings), findings, tuple(prebuilt))


@dataclass(frozen=True)
class ChoiceVerdict:
    """What the engine should do with its choice of ``status.choice``."""

    status: ChoiceStatus
    named: bool
    action: Action

    @property
    def choice(self) -> Choice:
        return self.status.choice


def verdict(status: ChoiceStatus, *, named: bool) -> ChoiceVerdict:
    """The engine chose FlashInfer for ``status.choice`` (``named``: because the user asked for it): keep it
    where it can work; else the engine's own path, or a stop when the user named it."""
    if status.usable:
        return ChoiceVerdict(status, named, "keep")
    return ChoiceVerdict(status, named, "refuse" if named else "fallback")


def prefill_in_process(era: str | None, gpu_majors: set[int | None]) -> bool:
    """Whether FlashInfer runs GDN prefill as an in-process CuTeDSL kernel where its nvcc era would build a
    module: on SM100 only (its Blackwell kernel, CUDA 13)."""
    return era == ERA_NVCC and gpu_majors == {10}


def normalise_request(value: object) -> str:
    """An engine's backend option as the engine reads it: a missing or empty value is 'auto'."""
    text = str(value).strip().lower() if value is not None else ""
    return text or "auto"


class ChoiceUnavailable(BackendUnavailable):
    """A FlashInfer path the user named cannot work here: the engine stops at start-up, saying why and what
    to type instead of building for minutes and failing. The one refusal of every engine plugin."""

    def __init__(self, status: ChoiceStatus, named_by: str, instead: str, engine: str = "vllm") -> None:
        self.status = status
        self.named_by = named_by
        self.instead = instead
        self.engine = engine
        super().__init__(status.choice.title, "flashinfer", status.blocking or status.findings, None)

    def _message(self) -> str:
        choice = self.status.choice
        lines = [
            f"jitguard: {choice.title} was requested ({self.named_by}) but cannot work here, so the engine "
            f"stops now, at start-up, instead of {choice.stakes}."
        ]
        for f in self.findings:
            lines += f.render_lines()
        lines.append(f"  Or {self.instead}: jitguard then lets the engine use {choice.fallback} here.")
        lines.append(
            f"  Details: `jitguard doctor --engine {self.engine}`. To run without jitguard: JITGUARD_DISABLE=1."
        )
        return "\n".join(lines)
