"""vLLM's GDN prefill backend choice: found by name in each released layout of vLLM's GDN layer.

- vLLM 0.22 and later: ``vllm/model_executor/layers/mamba/gdn/qwen_gdn_linear_attn.py``,
  ``_resolve_gdn_prefill_backend(vllm_config) -> (requested, active)``;
- vLLM 0.19 - 0.21 (spring 2026): ``vllm/model_executor/layers/mamba/gdn_linear_attn.py``,
  ``ChunkGatedDeltaRule.__init__`` sets ``_forward_method`` to ``forward_cuda`` (FlashInfer) or
  ``forward_native`` (Triton/FLA);
- vLLM 0.17 - 0.18: the same ``ChunkGatedDeltaRule`` in ``vllm/model_executor/models/qwen3_next.py``
  (0.17 has no ``--gdn-prefill-backend``: FlashInfer on every SM90).

Only a choice of FlashInfer is examined; then jitguard asks FlashInfer's GDN status (pre-flight findings on
this machine's facts, the failure cache, the recorded failures of FlashInfer's own GDN modules), once per
process: usable -> vLLM's choice stands; not usable and requested ``auto`` -> Triton/FLA, with one warning per
process naming the finding code and its fix; not usable and ``--gdn-prefill-backend flashinfer`` ->
``BackendUnavailable`` at engine init instead of a silent ~1 h build, a hang or a failure at the first
prefill. Every other choice (``triton``, ``cutedsl``, a GPU FlashInfer does not serve) is left alone. Ranks
decide alike: the verdict depends only on the facts of the host and the failure cache, never on the rank, and
is taken once per process so every layer (and vLLM's GDN attention metadata builder, which asks the same
function) agrees.
"""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING, Any, Literal

from jitguard.decision.engine import GDN_PREFILL
from jitguard.decision.gdn import UNVERIFIED
from jitguard.errors import BackendUnavailable
from jitguard.integrations.boundary import report_fault, shielded
from jitguard.integrations.vllm.sites import Guards, Site, layout_moved, mark, original_of, route_logs

if TYPE_CHECKING:
    from jitguard.decision.gdn import BackendStatus
    from jitguard.findings.model import Finding

log = logging.getLogger("jitguard.vllm")

OP = "GDN prefill"
FLASHINFER = "flashinfer"
TRITON = "triton"
# The name vLLM gives the option, in its config (additional_config) and on its command line.
OPTION = "gdn_prefill_backend"
FLAG = "--gdn-prefill-backend"

StatusProvider = Callable[[], "BackendStatus"]
Action = Literal["keep", "fallback", "refuse"]


@dataclass(frozen=True)
class Layout:
    """Where one family of vLLM releases decides the GDN prefill backend."""

    module: str
    target: str  # the function or method jitguard wraps
    releases: str


CURRENT = Layout(
    "vllm.model_executor.layers.mamba.gdn.qwen_gdn_linear_attn", "_resolve_gdn_prefill_backend", "0.22+"
)
SPRING_2026 = Layout(
    "vllm.model_executor.layers.mamba.gdn_linear_attn", "ChunkGatedDeltaRule.__init__", "0.19-0.21"
)
MODEL_FILE = Layout("vllm.model_executor.models.qwen3_next", "ChunkGatedDeltaRule.__init__", "0.17-0.18")
LAYOUTS = (CURRENT, SPRING_2026, MODEL_FILE)


# ---- the decision (pure) ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Verdict:
    """What vLLM should use for GDN prefill after jitguard looked at vLLM's choice.

    ``action``: 'keep' (vLLM's choice stands), 'fallback' (auto chose FlashInfer, which cannot work here:
    use Triton) or 'refuse' (FlashInfer was asked for explicitly and cannot work: fail now).
    """

    requested: str
    chosen: str
    backend: str
    action: Action
    status: BackendStatus | None = None

    @property
    def primary(self) -> Finding | None:
        """The finding a one-line message should name: the first blocking one (findings come most severe
        first)."""
        if self.status is None or not self.status.findings:
            return None
        blocking = [f for f in self.status.findings if f.severity == "error"]
        return (blocking or list(self.status.findings))[0]


def normalise_request(value: object) -> str:
    """vLLM's option as vLLM reads it: a missing or empty value is 'auto'."""
    text = str(value).strip().lower() if value is not None else ""
    return text or "auto"


def decide(requested: str, chosen: str, status: Callable[[], BackendStatus]) -> Verdict:
    """vLLM resolved ``requested`` to ``chosen``; decide what it should use. ``status`` is only called when
    the answer depends on it (vLLM chose FlashInfer)."""
    if chosen != FLASHINFER:
        return Verdict(requested, chosen, chosen, "keep")
    st = status()
    if st.usable:
        return Verdict(requested, chosen, chosen, "keep", st)
    if requested == FLASHINFER:
        return Verdict(requested, chosen, chosen, "refuse", st)
    return Verdict(requested, chosen, TRITON, "fallback", st)


class VllmBackendUnavailable(BackendUnavailable):
    """``--gdn-prefill-backend flashinfer`` was asked for and cannot work here. Says what to type in vLLM's
    terms."""

    def _message(self) -> str:
        lines = [
            f"jitguard: FlashInfer {OP} was requested ({FLAG} {FLASHINFER}) but cannot work here, so the engine "
            "stops now instead of building for up to an hour and failing, or hanging, later."
        ]
        blocking = [f for f in self.findings if f.severity == "error"] or list(self.findings)
        for f in blocking:
            lines += f.render_lines()
        lines.append(
            f"  Or serve with {FLAG} {TRITON}, or without {FLAG}: jitguard then uses Triton/FLA here on its own."
        )
        lines.append("  Details: `jitguard doctor`. To run vLLM without jitguard: JITGUARD_DISABLE=1.")
        return "\n".join(lines)


# ---- per-process state: one status, one warning -----------------------------------------------------------
def default_status() -> BackendStatus:
    """FlashInfer GDN prefill's status on this process's facts (collected once, within the pre-flight deadline,
    shared with every other choice), the failure cache and the recorded failures of FlashInfer's GDN modules."""
    from jitguard.integrations.choices import gdn_status
    from jitguard.integrations.vllm import engine_facts

    return gdn_status(engine_facts().get())


def default_triton_check(flashinfer: Finding | None) -> bool:
    """Log one error line when the Triton/FLA path vLLM takes cannot build Triton's launcher here (with
    FlashInfer's block, when that is why); True when it did."""
    from jitguard.integrations.triton_jit import warn_if_blocked
    from jitguard.integrations.vllm import engine_facts

    try:
        facts = engine_facts().get()
    except Exception:  # already reported once by the facts' collection
        return False
    return warn_if_blocked("vLLM", OP, facts, flashinfer)


class GdnGuard:
    """Applies ``decide`` for one process: asks for the status at most once, warns at most once."""

    def __init__(
        self, status: StatusProvider | None = None, triton: Callable[[Finding | None], bool] | None = None
    ) -> None:
        self._triton = triton or default_triton_check
        self._provider = status or default_status
        self._status: BackendStatus | None = None
        self._status_failed = False
        self._announced: set[str] = set()
        self._lock = threading.RLock()

    def set_status(self, status: StatusProvider | None) -> None:
        with self._lock:
            self._provider = status or default_status
            self._status = None
            self._status_failed = False
            self._announced.clear()

    def status(self) -> BackendStatus:
        """FlashInfer's status, taken once. (The facts behind it are collected within
        JITGUARD_PREFLIGHT_TIMEOUT, so the engine never waits on a pre-flight that hangs.)"""
        with self._lock:
            if self._status is None:
                self._status = self._provider()
            return self._status

    def choose(self, requested: str, chosen: str) -> str:
        """The backend vLLM should use; raises VllmBackendUnavailable for an explicit FlashInfer that cannot
        work. A crash in jitguard's own checks leaves vLLM's choice in place (warned once)."""
        with self._lock:
            route_logs()  # vLLM may have configured its logging only after register() ran
            if self._status_failed and chosen == FLASHINFER:
                return chosen
            try:
                verdict = decide(requested, chosen, self.status)
            except Exception as exc:
                self._status_failed = True
                report_fault(f"the check of FlashInfer {OP}", f"vLLM's choice ({chosen}) stands", exc)
                return chosen
            self._announce(verdict)
            if verdict.action == "keep" and verdict.backend == TRITON and "triton" not in self._announced:
                self._announced.add("triton")  # vLLM's own Triton/FLA: it too needs Triton's JIT
                self._triton(None)
            if verdict.action == "refuse":
                assert verdict.status is not None
                raise VllmBackendUnavailable(OP, FLASHINFER, verdict.status.findings, TRITON)
            return verdict.backend

    def _announce(self, verdict: Verdict) -> None:
        if verdict.action == "fallback" and "fallback" not in self._announced:
            self._announced.add("fallback")
            self._announced.add("triton")
            f = verdict.primary
            what = f"[{f.code}] {f.title}" if f else "jitguard's checks rule it out"
            fix = f"{f.fix_suffix()}." if f and f.fixes else ""
            log.warning(
                "jitguard: vLLM chose FlashInfer %s (%s %s), but it cannot work here: %s.%s Using Triton/FLA "
                "instead (same results, slower prefill). Details: `jitguard doctor`; to keep vLLM's choice: "
                "JITGUARD_DISABLE=1.",
                OP,
                FLAG,
                verdict.requested,
                what,
                fix,
            )
            self._triton(f)  # Triton's JIT blocked too: one error line more, naming both blocks and fixes
        elif verdict.action == "keep" and verdict.status is not None and "keep" not in self._announced:
            self._announced.add("keep")
            unknown = [f for f in verdict.status.findings if f.code == UNVERIFIED]
            if unknown:  # never "passed" for a check that did not run
                log.warning(
                    "jitguard: could not verify FlashInfer %s here: [%s] %s.%s vLLM's choice (flashinfer) "
                    "stands; its JIT build is still supervised.",
                    OP,
                    unknown[0].code,
                    unknown[0].title,
                    unknown[0].fix_suffix(),
                )
                return
            log.info(
                "jitguard: FlashInfer %s passed pre-flight here; its JIT build is supervised and shared by "
                "the ranks.",
                OP,
            )


# ---- the patches, one per layout --------------------------------------------------------------------------
def _patch_current(module: ModuleType, guards: Guards) -> bool:
    """vLLM >= 0.22: wrap ``_resolve_gdn_prefill_backend(vllm_config) -> (requested, active)``. Callers look
    the name up in the module at call time (the layer, the attention metadata builder, other GDN layers'
    ``from ... import``), so replacing the module attribute reaches all of them."""
    original = getattr(module, CURRENT.target, None)
    if not callable(original):
        layout_moved(module.__name__, CURRENT.target, OP)
        return False
    if original_of(original) is not None:
        return True

    @functools.wraps(original)
    def resolve_gdn_prefill_backend(*args: Any, **kwargs: Any) -> Any:
        result = original(*args, **kwargs)
        try:
            requested, active = result
        except (TypeError, ValueError):
            return result  # not the (requested, active) pair this wrapper knows: leave it alone
        backend = shielded(
            "vLLM's GDN prefill choice",
            f"vLLM's choice ({active}) stands",
            lambda: guards.gdn.choose(normalise_request(requested), str(active)),
            lambda: str(active),
        )
        if backend == FLASHINFER:
            _expect_gdn_variants(args[0] if args else kwargs.get("vllm_config"))
        return result if backend == active else (requested, backend)

    setattr(module, CURRENT.target, mark(resolve_gdn_prefill_backend, original))
    return True


def _patch_op_init(module: ModuleType, guards: Guards) -> bool:
    """vLLM 0.17-0.21: the choice lives in ``ChunkGatedDeltaRule.__init__``, which reads the option (0.18+)
    from the current vLLM config and sets ``self._forward_method`` to ``forward_cuda`` (FlashInfer) or
    ``forward_native`` (Triton/FLA). Wrap it and correct the method it picked. (In later releases
    ``models/qwen3_next.py`` no longer defines the op: a debug line says so.)"""
    cls = module.__dict__.get("ChunkGatedDeltaRule")
    original = getattr(cls, "__init__", None) if cls is not None else None
    if cls is None or not callable(original) or not hasattr(cls, "forward_native"):
        if module.__name__ == MODEL_FILE.module:  # later releases keep only the model here: expected
            log.debug("jitguard: %s defines no ChunkGatedDeltaRule; nothing to guard there", module.__name__)
        else:
            layout_moved(module.__name__, "ChunkGatedDeltaRule.__init__", OP)
        return False
    if original_of(original) is not None:
        return True

    def requested_backend() -> str:
        get_config = getattr(module, "get_current_vllm_config", None)
        extra = getattr(get_config(), "additional_config", None) if callable(get_config) else None
        return normalise_request(extra.get(OPTION) if isinstance(extra, Mapping) else None)

    @functools.wraps(original)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        if getattr(self, "_forward_method", None) != self.forward_cuda:
            return  # vLLM chose Triton/FLA itself: nothing to check
        backend = shielded(
            "vLLM's GDN prefill choice",
            "vLLM's choice (flashinfer) stands",
            lambda: guards.gdn.choose(requested_backend(), FLASHINFER),
            lambda: FLASHINFER,
        )
        if backend != FLASHINFER:
            self._forward_method = self.forward_native
        else:
            get_config = getattr(module, "get_current_vllm_config", None)
            _expect_gdn_variants(get_config() if callable(get_config) else None)

    cls.__init__ = mark(__init__, original)
    return True


def _expect_gdn_variants(vllm_config: Any) -> None:
    """FlashInfer GDN prefill it is: tell jitguard's variant router the instances this model will call, from
    its config and dtype (vLLM always passes beta, alpha and an initial state), before the first call."""

    def expect() -> None:
        model_config = getattr(vllm_config, "model_config", None)
        hf = getattr(model_config, "hf_text_config", None) or getattr(model_config, "hf_config", None)
        to_dict = getattr(hf, "to_dict", None)
        if callable(to_dict):
            from jitguard.integrations.flashinfer import expect_gdn_variants

            dtype = getattr(model_config, "dtype", None)
            expect_gdn_variants(
                to_dict(), str(dtype) if dtype is not None else None, source="the model config"
            )

    shielded(
        "planning FlashInfer's GDN prefill variants", "the first call decides them", expect, lambda: None
    )


def _unpatch(module: ModuleType) -> None:
    if module.__name__ == CURRENT.module:
        original = original_of(getattr(module, CURRENT.target, None))
        if original is not None:
            setattr(module, CURRENT.target, original)
        return
    cls = module.__dict__.get("ChunkGatedDeltaRule")
    original = original_of(getattr(cls, "__init__", None))
    if cls is not None and original is not None:
        cls.__init__ = original


_NAMED = f"{FLAG} {FLASHINFER} (additional_config {OPTION})"
_ANSWER = "Triton/FLA: the resolver's answer, or ChunkGatedDeltaRule._forward_method = forward_native"
SITES = (
    Site(GDN_PREFILL, CURRENT.module, CURRENT.target, "0.22-0.33", _NAMED, _ANSWER, _patch_current, _unpatch),
    Site(
        GDN_PREFILL,
        SPRING_2026.module,
        SPRING_2026.target,
        "0.19-0.21",
        _NAMED,
        _ANSWER,
        _patch_op_init,
        _unpatch,
    ),
    Site(
        GDN_PREFILL,
        MODEL_FILE.module,
        MODEL_FILE.target,
        "0.17-0.18",
        f"{_NAMED}; 0.17 has no option (FlashInfer on every SM90)",
        _ANSWER,
        _patch_op_init,
        _unpatch,
    ),
)
