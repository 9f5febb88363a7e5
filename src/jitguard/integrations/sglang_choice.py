"""SGLang's linear-attention kernel choice, phase by phase, and jitguard's verdict on it. Pure: plain values in,
a verdict out; nothing here imports SGLang (``integrations/sglang.py`` reads SGLang and applies the verdicts).

SGLang picks a kernel backend per phase: ``--linear-attn-backend`` for all, overridden by
``--linear-attn-prefill-backend``, ``--linear-attn-decode-backend`` and (0.5.18+) ``--linear-attn-verify-backend``
(unset, verify follows decode when decode is FlashInfer, else Triton). It picks FlashInfer by itself for decode
on SM100 with ``--mamba-ssm-dtype bfloat16`` (0.5.x), and for prefill in its validated GDN domains (0.5.18:
SM100 with CUDA 13; 0.5.19+: SM90 too).

Which facts decide which phase (read from FlashInfer 0.6.12 and 0.7.2, the versions SGLang 0.5.15 and 0.5.23 pin):

- **prefill** runs ``flashinfer.gdn_prefill.chunk_gated_delta_rule``: jitguard's FlashInfer GDN prefill verdict
  as it is (pre-flight on this machine's facts plus the failure cache), the same one the vLLM plugin uses;
  in the nvcc era (FlashInfer <= 0.6.13, SGLang <= 0.5.15) on SM90 that includes the 34-66 file nvcc build.
  One exception: on SM100, FlashInfer 0.6.x of the nvcc era runs a CuTeDSL Blackwell kernel (CUDA 13), not
  the nvcc module, so there only the kernel-wide findings below and a recorded failure decide.
- **decode** and **verify** run FlashInfer's GDN decode/MTP kernels, CuTeDSL kernels compiled in-process in
  every FlashInfer SGLang pins: no nvcc, no link. Only the findings that stop every FlashInfer GDN kernel
  decide them (``KERNEL_WIDE``: no GPU, no CUDA torch, FlashInfer missing or unimportable, the CuTeDSL
  missing, too old or its install damaged); the prefill build's findings and its cached failure do not.

Which GPU runs what is SGLang's own call: it picks FlashInfer by itself only where it validated it, and its own
kernel set-up refuses a GPU FlashInfer does not serve; jitguard adds what SGLang does not check.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from jitguard.errors import BackendUnavailable

if TYPE_CHECKING:
    from jitguard.decision.gdn import BackendStatus
    from jitguard.facts import Facts
    from jitguard.findings.model import Finding

FLASHINFER = "flashinfer"
TRITON = "triton"
PHASES = ("prefill", "decode", "verify")
BASE = "linear_attn_backend"
OP = "linear attention"
UNKNOWN = "<unknown>"  # a request value jitguard cannot read in this SGLang version
# Where jitguard keeps the linear-attention options as given, on SGLang's ServerArgs (<= 0.5.18). A leading
# underscore: SGLang's read-only ServerArgs (0.5.18) lets such names through, and pickling carries them to the
# scheduler processes.
STASH = "_jitguard_linear_attn_request"

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
    }
)

Action = Literal["keep", "fallback", "refuse"]


@dataclass(frozen=True)
class FlashInferHere:
    """What jitguard knows about FlashInfer's GDN kernels in this process."""

    status: BackendStatus  # FlashInfer GDN prefill: pre-flight on this machine's facts + the failure cache
    prefill_in_process: bool = False  # nvcc-era FlashInfer whose prefill here is its CuTeDSL Blackwell kernel


def flashinfer_here(facts: Facts, status: BackendStatus) -> FlashInferHere:
    """``status`` with the one fact the phases need beyond it: which prefill kernel FlashInfer runs here."""
    from jitguard.facts.flashinfer import ERA_NVCC

    majors = {d.major for d in facts.gpu.devices}
    return FlashInferHere(status, facts.flashinfer.era == ERA_NVCC and majors == {10})


def option(phase: str) -> str:
    """SGLang's ServerArgs field for ``phase`` (``BASE`` for all phases)."""
    return BASE if phase == "base" else f"linear_attn_{phase}_backend"


def flag(name: str) -> str:
    """A ServerArgs field as SGLang's command line spells it."""
    return "--" + name.replace("_", "-")


OPTIONS = tuple(option(p) for p in ("base", *PHASES))


def request_of(server_args: object) -> dict[str, object]:
    """The linear-attention options as the operator gave them: SGLang's raw input (0.5.19+), else the fields
    with the decode option jitguard kept before SGLang's own default overwrote it (UNKNOWN if it could not)."""
    raw = getattr(server_args, "_raw_input", None)
    if isinstance(raw, Mapping):
        return {name: raw.get(name) for name in OPTIONS}
    request = {name: getattr(server_args, name, None) for name in OPTIONS}
    kept = getattr(server_args, STASH, None)
    request[option("decode")] = kept.get(option("decode")) if isinstance(kept, Mapping) else UNKNOWN
    return request


def named_by(phase: str, request: Mapping[str, object]) -> str | None:
    """The option by which the operator asked for FlashInfer for ``phase`` (e.g. ``--linear-attn-backend``),
    or None when they did not, or when ``request`` (the options as given, before SGLang's own defaults)
    cannot say: then SGLang's choice is treated as SGLang's own, the fail-safe reading."""
    own = request.get(option(phase))
    if own == UNKNOWN:
        return None
    if phase == "verify" and own is None:
        return named_by("decode", request)  # unset verify follows decode
    if own:
        return flag(option(phase)) if own == FLASHINFER else None
    base = request.get(BASE)
    return flag(BASE) if base == FLASHINFER else None


def phase_status(phase: str, here: FlashInferHere) -> BackendStatus:
    """FlashInfer's status as it bears on ``phase``: see the module docstring."""
    status = here.status
    if phase == "prefill" and not here.prefill_in_process:
        return status
    from jitguard.decision.gdn import BackendStatus

    codes = KERNEL_WIDE | ({"gdn-cached-failure"} if phase == "prefill" else set())
    kept = tuple(f for f in status.findings if f.code in codes)
    return BackendStatus(status.name, not any(f.severity == "error" for f in kept), kept)


@dataclass(frozen=True)
class PhaseVerdict:
    """What SGLang should use for one phase after jitguard looked at its choice."""

    phase: str
    chosen: str  # SGLang's choice
    named: str | None  # the option that asked for FlashInfer by name, if any
    backend: str  # what SGLang should use
    action: Action
    findings: tuple[Finding, ...] = ()

    @property
    def primary(self) -> Finding | None:
        """The finding a one-line message names: the first blocking one (findings come most severe first)."""
        ranked = [f for f in self.findings if f.severity == "error"] or list(self.findings)
        return ranked[0] if ranked else None


def decide(phase: str, chosen: str, named: str | None, here: Callable[[], FlashInferHere]) -> PhaseVerdict:
    """SGLang chose ``chosen`` for ``phase``; ``here`` is only called when that is FlashInfer."""
    if chosen != FLASHINFER:
        return PhaseVerdict(phase, chosen, named, chosen, "keep")
    st = phase_status(phase, here())
    if st.usable:
        return PhaseVerdict(phase, chosen, named, chosen, "keep", st.findings)
    action: Action = "refuse" if named else "fallback"
    return PhaseVerdict(phase, chosen, named, TRITON if action == "fallback" else chosen, action, st.findings)


def fallback_message(verdicts: Sequence[PhaseVerdict]) -> str:
    """The one warning line for phases moved to Triton."""
    phases = ", ".join(v.phase for v in verdicts)
    f = verdicts[0].primary
    what = f"[{f.code}] {f.title}" if f else "jitguard's checks rule it out"
    fix = f" Fix: {f.fixes[0].render()}." if f and f.fixes else ""
    return (
        f"jitguard: SGLang chose FlashInfer for {OP} {phases} (not asked for by name), but it cannot work here: "
        f"{what}.{fix} Using Triton for {phases} instead (same results, slower). Details: `jitguard doctor`; "
        "to keep SGLang's choice: JITGUARD_DISABLE=1."
    )


class SglangBackendUnavailable(BackendUnavailable):
    """FlashInfer was asked for by name for a linear-attention phase and cannot work here. Says what to type
    in SGLang's terms."""

    def __init__(self, verdict: PhaseVerdict) -> None:
        self.verdict = verdict
        super().__init__(f"{OP} {verdict.phase}", FLASHINFER, verdict.findings)

    def _message(self) -> str:
        v = self.verdict
        named = v.named or flag(option(v.phase))
        own = flag(option(v.phase))
        return "\n".join(
            [
                f"jitguard: FlashInfer {OP} {v.phase} was requested ({named} {FLASHINFER}) but cannot work "
                "here, so SGLang stops now, at start-up, instead of failing at the first request or after a JIT "
                "build (up to an hour for the nvcc-built GDN prefill).",
                *super()._message().splitlines()[1:],  # each blocking finding with its fixes
                f"  Or serve with {own} {TRITON}, or without {named}: jitguard then uses Triton here on its own "
                "where FlashInfer cannot work.",
                "  Details: `jitguard doctor`. To run SGLang without jitguard: JITGUARD_DISABLE=1.",
            ]
        )
