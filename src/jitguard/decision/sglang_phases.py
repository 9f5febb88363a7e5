"""SGLang's linear-attention kernel choice, phase by phase: one ``Choice`` per phase (``PHASE_CHOICES``), judged
by the one choice core (``decision.engine_verdicts``), and how the operator asked for FlashInfer.

Prefill runs FlashInfer's GDN prefill and takes its verdict as it is (the vLLM plugin's); decode and verify
run CuTeDSL kernels compiled in-process, so only the findings that stop every FlashInfer GDN kernel decide them
(``decision.engine_verdicts.KERNEL_WIDE``) (docs/sglang.md). Pure: nothing here imports SGLang
(``integrations/sglang.py`` reads SGLang and applies the verdicts).
"""

from __future__ import annotations

from collections.abc import Mapping

from jitguard.decision.engine_verdicts import KERNEL_WIDE, Choice

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
