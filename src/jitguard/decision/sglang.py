"""SGLang's linear-attention kernel choice, phase by phase: one ``Choice`` per phase (``PHASE_CHOICES``), judged
by the one choice core (``decision.engine``), and how the operator asked for FlashInfer. Pure: plain values in,
plain values out; nothing here imports SGLang (``integrations/sglang.py`` reads SGLang and applies the
verdicts).

SGLang picks a kernel backend per phase: ``--linear-attn-backend`` for all, overridden by
``--linear-attn-prefill-backend``, ``--linear-attn-decode-backend`` and (0.5.17+) ``--linear-attn-verify-backend``
(unset, verify follows decode when decode is FlashInfer, else Triton). It picks FlashInfer by itself for decode
on SM100 with ``--mamba-ssm-dtype bfloat16`` (0.5.x), and for prefill in its validated GDN domains (0.5.17, 0.5.18:
SM100 with CUDA 13; 0.5.19+: SM90 too).

Which facts decide which phase (read from FlashInfer 0.6.12 and 0.7.2, the versions SGLang 0.5.15 and 0.5.23 pin):

- **prefill** runs ``flashinfer.gdn_prefill.chunk_gated_delta_rule``: jitguard's FlashInfer GDN prefill verdict
  as it is (pre-flight on this machine's facts, the failure cache, the recorded failures of FlashInfer's GDN
  modules), the same one the vLLM plugin uses;
  in the nvcc era (FlashInfer <= 0.6.13, SGLang <= 0.5.15) on SM90 that includes the 34-66 file nvcc build.
  One exception: on SM100, FlashInfer 0.6.x of the nvcc era runs a CuTeDSL Blackwell kernel (CUDA 13), not
  the nvcc module, so there only the kernel-wide findings below and a recorded failure decide.
- **decode** and **verify** run FlashInfer's GDN decode/MTP kernels, CuTeDSL kernels compiled in-process in
  every FlashInfer SGLang pins: no nvcc, no link. Only the findings that stop every FlashInfer GDN kernel
  decide them (``decision.engine.KERNEL_WIDE``: no GPU, no CUDA torch, FlashInfer missing or unimportable, the CuTeDSL
  missing, too old or its install damaged); the prefill build's findings and its cached failure do not.

Which GPU runs what is SGLang's own call: it picks FlashInfer by itself only where it validated it, and its own
kernel set-up refuses a GPU FlashInfer does not serve; jitguard adds what SGLang does not check.
"""

from __future__ import annotations

from collections.abc import Mapping

from jitguard.decision.engine import KERNEL_WIDE, Choice

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


def option(phase: str) -> str:
    """SGLang's ServerArgs field for ``phase`` (``BASE`` for all phases)."""
    return BASE if phase == "base" else f"linear_attn_{phase}_backend"


def flag(name: str) -> str:
    """A ServerArgs field as SGLang's command line spells it."""
    return "--" + name.replace("_", "-")


OPTIONS = tuple(option(p) for p in ("base", *PHASES))


def _phase(phase: str, decided_by: frozenset[str] | None, in_process: frozenset[str] | None) -> Choice:
    return Choice(
        f"linear-attn-{phase}",
        f"FlashInfer {OP} {phase}",
        ("gdn_prefill",) if phase == "prefill" else (),
        default="see DEFAULTS in jitguard.integrations.sglang",
        named_by=f"{flag(option(phase))} {FLASHINFER} (or {flag(BASE)} {FLASHINFER})",
        fallback="Triton (same results, slower)",
        gdn=True,
        decided_by=decided_by,
        in_process_decided_by=in_process,
        stakes="failing at the first request or after a JIT build (up to an hour for the nvcc-built GDN prefill)",
    )


PHASE_CHOICES: dict[str, Choice] = {
    "prefill": _phase("prefill", None, KERNEL_WIDE | {"gdn-cached-failure"}),
    "decode": _phase("decode", KERNEL_WIDE, None),
    "verify": _phase("verify", KERNEL_WIDE, None),
}


def instead(phase: str, named: str) -> str:
    """What to type instead of a FlashInfer that cannot work for ``phase`` (``named``: the option used)."""
    return f"serve with {flag(option(phase))} {TRITON}, or without {named}"


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
