"""Proven, not presumed: a FlashInfer choice jitguard admitted runs once in the engine process before the engine
reports ready, and what happens when it raises. One mechanism for every engine:

- ``settle``: a failed engine warmup or proof call is recorded by fingerprint, then ``auto`` moves the choice to
  its fallback with one warning and a named FlashInfer stops the start (``ChoiceUnavailable``);
- ``prove``: where the engine makes no warmup call, jitguard calls the engine's function once on a tiny input of
  the model's shapes, skipped only where a pass is recorded under the same key (``proof_key``: the fingerprint
  and the digest of the packages' installed files). Cost and measurements: docs/vllm.md.
"""

from __future__ import annotations

import hashlib
import logging
import traceback
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from jitguard.boundary.failsafe import shielded
from jitguard.facts.installed_files import installed_files
from jitguard.findings.catalog import make
from jitguard.integrations.choices import Ask
from jitguard.state.failure_cache import FailureCache, ttl_from_env
from jitguard.state.module_names import GDN_OP_FLASHINFER
from jitguard.state.proof_passes import ProofPasses

if TYPE_CHECKING:
    from jitguard.decision.engine_verdicts import Choice
    from jitguard.findings.model import Finding
    from jitguard.integrations.choices import ChoiceGuard

log = logging.getLogger("jitguard.engine")

WARMUP_FAILED = "engine-warmup-failed"  # the engine's own warmup call raised
PROOF_FAILED = "engine-proof-failed"  # jitguard's proof call raised
TOKENS = 64  # the tiny input's length: one chunk of FlashInfer's and FLA's GDN prefill


@dataclass(frozen=True)
class Trial:
    """``choice`` run once in ``engine``'s process, at ``where``; ``named``: how the user asked for FlashInfer
    (None: the engine's own choice, ``auto``); ``instead``: what to type to stop naming it; ``moved``: what
    jitguard does in ``auto`` (a sentence, for the finding)."""

    choice: Choice
    where: str
    named: str | None = None
    instead: str = ""
    moved: str = "jitguard moved it to its fallback before the engine reports ready."


def settle(guard: ChoiceGuard, trial: Trial, exc: BaseException, *, code: str) -> bool:
    """Record ``exc`` (finding ``code``) and tell the guard; True: the choice moves to its fallback (auto). A
    named FlashInfer raises ``ChoiceUnavailable`` (through the guard), which stops the start."""
    findings = failure_findings(guard, trial, exc, code=code)
    guard.failed(trial.choice, findings, announce=trial.named is None)
    if trial.named is not None:
        guard.settle([Ask(trial.choice, named=trial.named, instead=trial.instead)])
    return True


def failure_findings(guard: ChoiceGuard, trial: Trial, exc: BaseException, *, code: str) -> list[Finding]:
    """``code`` for ``exc``, recorded in the failure cache under FlashInfer GDN prefill's name (the jitguard.gdn
    op's: ``gdn-prefill/flashinfer``) and this host's fingerprint."""
    facts = guard.facts.get()
    tail = traceback.format_exception(type(exc), exc, exc.__traceback__)
    frames = [line.strip() for line in "".join(tail).splitlines() if line.strip().startswith("File ")]
    then = (
        "the start stops here, before the engine reports ready, because FlashInfer was named."
        if trial.named is not None
        else trial.moved
    )
    finding = make(
        code,
        backend="flashinfer",
        evidence=[f"{type(exc).__name__}: {exc}", *frames[-3:]],
        engine=guard.engine,
        title=trial.choice.title,
        where=trial.where,
        error_type=type(exc).__name__,
        error_message=str(exc),
        then=then,
        fingerprint=facts.fingerprint,
        module=GDN_OP_FLASHINFER,
    )
    FailureCache(guard.settings.cache_dir, ttl=ttl_from_env()).record_failure(
        GDN_OP_FLASHINFER, facts.fingerprint, [finding]
    )
    return [finding]


def proof_key(guard: ChoiceGuard) -> str:
    """What a proof's pass holds for: this host's fingerprint (package versions, GPU arch and driver, the
    toolchain) and the digest of FlashInfer's and the CUTLASS DSL's installed files."""

    files = installed_files()
    text = f"{guard.facts.get().fingerprint}\n{files.digest}"
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def prove(guard: ChoiceGuard, trial: Trial, call: Callable[[], object]) -> bool:
    """Whether the engine may keep FlashInfer for ``trial.choice``, proven once per process: a recorded pass
    under this start's key (proven by record), else ``call()`` (the engine's function on a tiny input), which
    must return. A raise is settled (``settle``): False in ``auto``, ``ChoiceUnavailable`` when named."""
    choice = trial.choice
    if guard.known_failed(choice):  # an earlier call in this process failed: the same verdict, no call
        if trial.named is not None:
            guard.settle([Ask(choice, named=trial.named, instead=trial.instead)])
        return False
    if guard.is_proven(choice):
        return True
    key = shielded("the key of FlashInfer's proof", "the proof call runs", lambda: proof_key(guard), _none)
    if key is not None and _passes(guard, lambda p: p.passed(choice.key, key)):
        guard.proven(choice, trial.where, record=key)
        return True
    failure: Exception | None = None
    try:
        call()
    except Exception as exc:  # whatever the engine's own call raises is the evidence
        failure = exc
    if failure is not None:
        raised = failure
        moved = shielded(
            f"{guard.engine}'s failed proof of {choice.title}",
            f"{guard.engine}'s choice stands",
            lambda: settle(guard, trial, raised, code=PROOF_FAILED),
            lambda: False,
        )
        return not moved
    guard.proven(choice, trial.where)
    if key is not None:
        _passes(guard, lambda p: p.record(choice.key, key))
    return True


def _passes(guard: ChoiceGuard, use: Callable[[Any], bool]) -> bool:
    return shielded(
        "the record of FlashInfer's proof",
        "the proof call runs",
        lambda: use(ProofPasses(guard.settings.cache_dir)),
        lambda: False,
    )


def _none() -> None:
    return None


@dataclass(frozen=True)
class PrefillShapes:
    """A GDN layer's prefill shapes in one process (after tensor parallelism): ``qk_heads`` and ``v_heads``,
    the head dims ``k_dim`` and ``v_dim``, the activations' and the state's dtype, the device (torch
    objects)."""

    qk_heads: int
    v_heads: int
    k_dim: int
    v_dim: int
    dtype: Any
    state_dtype: Any
    device: Any


def tiny_prefill_inputs(shapes: PrefillShapes, tokens: int = TOKENS) -> Mapping[str, Any]:
    """Keyword arguments for FlashInfer's ``gdn_prefill.chunk_gated_delta_rule`` (packed ``[T, H, D]``, linear
    alpha and beta in float32, an ``[N, Hv, V, K]`` initial state of ``state_dtype``, int64 ``cu_seqlens``) for one
    sequence of ``tokens`` tokens of ``shapes``: small values, q and k l2-normalised as the engines pass them."""
    import torch

    device, dtype = shapes.device, shapes.dtype
    generator = torch.Generator(device="cpu").manual_seed(0)

    def normal(*size: int) -> Any:
        return torch.randn(*size, generator=generator)

    q = torch.nn.functional.normalize(normal(tokens, shapes.qk_heads, shapes.k_dim), dim=-1)
    k = torch.nn.functional.normalize(normal(tokens, shapes.qk_heads, shapes.k_dim), dim=-1)
    heads = max(shapes.qk_heads, shapes.v_heads)
    return {
        "q": q.to(device=device, dtype=dtype),
        "k": k.to(device=device, dtype=dtype),
        "v": normal(tokens, shapes.v_heads, shapes.v_dim).to(device=device, dtype=dtype),
        "g": torch.full((tokens, heads), 0.9, dtype=torch.float32, device=device),
        "beta": torch.full((tokens, heads), 0.5, dtype=torch.float32, device=device),
        "scale": None,
        "initial_state": torch.zeros(
            1, shapes.v_heads, shapes.v_dim, shapes.k_dim, dtype=shapes.state_dtype, device=device
        ),
        "output_final_state": True,
        "cu_seqlens": torch.tensor([0, tokens], dtype=torch.int64, device=device),
        "use_qk_l2norm_in_kernel": False,
    }
