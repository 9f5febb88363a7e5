"""vLLM plugin: guard vLLM's GDN prefill backend choice and every FlashInfer JIT build in the engine.

vLLM calls the ``vllm.general_plugins`` entry point ``jitguard = "jitguard.integrations.vllm:register"`` in
every process it starts (API server, engine core, each worker), before the model is built; a process may call
it more than once. ``register()`` is cheap: it imports neither vLLM nor torch nor FlashInfer, and does nothing
at all when vLLM is not installed or ``JITGUARD_DISABLE=1``.

It does two things:

- **The GDN prefill backend choice.** Where a released vLLM decides between FlashInfer and Triton/FLA for
  Gated DeltaNet prefill, found by name and patched the moment its module is imported (``LAYOUTS``):

  - vLLM 0.22 and later: ``vllm/model_executor/layers/mamba/gdn/qwen_gdn_linear_attn.py``,
    ``_resolve_gdn_prefill_backend(vllm_config) -> (requested, active)``;
  - vLLM 0.19 - 0.21 (spring 2026): ``vllm/model_executor/layers/mamba/gdn_linear_attn.py``,
    ``ChunkGatedDeltaRule.__init__`` sets ``_forward_method`` to ``forward_cuda`` (FlashInfer) or
    ``forward_native`` (Triton/FLA);
  - vLLM 0.17 - 0.18: the same ``ChunkGatedDeltaRule`` in ``vllm/model_executor/models/qwen3_next.py``
    (0.17 has no ``--gdn-prefill-backend``: FlashInfer on every SM90).

  Only a choice of FlashInfer is examined; then jitguard asks ``backend_status("flashinfer")`` (pre-flight
  findings on this machine's facts + the failure cache), once per process:
  usable -> vLLM's choice stands; not usable and requested ``auto`` -> Triton/FLA, with one warning per
  process naming the finding code and its fix; not usable and ``--gdn-prefill-backend flashinfer`` ->
  ``BackendUnavailable`` at engine init instead of a silent ~1 h build, a hang or a failure at the first
  prefill. Every other choice (``triton``, ``cutedsl``, a GPU FlashInfer does not serve) is left alone.
  Ranks decide alike: the verdict depends only on the facts of the host and the failure cache, never on the
  rank, and is taken once per process so every layer (and vLLM's GDN attention metadata builder, which asks
  the same function) agrees.
- **FlashInfer builds.** ``jitguard.install()``: every FlashInfer nvcc JIT build in the engine (GDN,
  sampling, MoE, ...) is memory-bounded, watched and shared by the ranks.
"""

from __future__ import annotations

import functools
import importlib.util
import logging
import sys
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING, Any, Literal

from jitguard.decision.gdn import UNVERIFIED
from jitguard.errors import BackendUnavailable
from jitguard.integrations.boundary import report_fault, shielded, with_deadline
from jitguard.integrations.import_hooks import PostImportHook

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
_MARK = "__jitguard_original__"

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
    """FlashInfer's status from this process's facts and the failure cache (the GDN resolver's answer)."""
    from jitguard.gdn.dispatch import backend_status

    return backend_status(FLASHINFER)


class GdnGuard:
    """Applies ``decide`` for one process: asks for the status at most once, warns at most once."""

    def __init__(self, status: StatusProvider | None = None) -> None:
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
        """FlashInfer's status, taken once; a pre-flight that hangs (a wedged driver, a stuck filesystem) is
        given up after JITGUARD_PREFLIGHT_TIMEOUT, so the engine never waits on jitguard."""
        with self._lock:
            if self._status is None:
                self._status = with_deadline("jitguard's FlashInfer pre-flight", self._provider)
            return self._status

    def choose(self, requested: str, chosen: str) -> str:
        """The backend vLLM should use; raises VllmBackendUnavailable for an explicit FlashInfer that cannot
        work. A crash in jitguard's own checks leaves vLLM's choice in place (warned once)."""
        with self._lock:
            _route_logs()  # vLLM may have configured its logging only after register() ran
            if self._status_failed and chosen == FLASHINFER:
                return chosen
            try:
                verdict = decide(requested, chosen, self.status)
            except Exception as exc:
                self._status_failed = True
                report_fault(f"the check of FlashInfer {OP}", f"vLLM's choice ({chosen}) stands", exc)
                return chosen
            self._announce(verdict)
            if verdict.action == "refuse":
                assert verdict.status is not None
                raise VllmBackendUnavailable(OP, FLASHINFER, verdict.status.findings, TRITON)
            return verdict.backend

    def _announce(self, verdict: Verdict) -> None:
        if verdict.action == "fallback" and "fallback" not in self._announced:
            self._announced.add("fallback")
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
def _patch_current(module: ModuleType, guard: GdnGuard) -> bool:
    """vLLM >= 0.22: wrap ``_resolve_gdn_prefill_backend(vllm_config) -> (requested, active)``. Callers look
    the name up in the module at call time (the layer, the attention metadata builder, other GDN layers'
    ``from ... import``), so replacing the module attribute reaches all of them."""
    original = getattr(module, CURRENT.target, None)
    if not callable(original):
        _layout_moved(module.__name__, CURRENT.target)
        return False
    if hasattr(original, _MARK):
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
            lambda: guard.choose(normalise_request(requested), str(active)),
            lambda: str(active),
        )
        if backend == FLASHINFER:
            _expect_gdn_variants(args[0] if args else kwargs.get("vllm_config"))
        return result if backend == active else (requested, backend)

    setattr(resolve_gdn_prefill_backend, _MARK, original)
    setattr(module, CURRENT.target, resolve_gdn_prefill_backend)
    return True


def _patch_op_init(module: ModuleType, guard: GdnGuard) -> bool:
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
            _layout_moved(module.__name__, "ChunkGatedDeltaRule.__init__")
        return False
    if hasattr(original, _MARK):
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
            lambda: guard.choose(requested_backend(), FLASHINFER),
            lambda: FLASHINFER,
        )
        if backend != FLASHINFER:
            self._forward_method = self.forward_native
        else:
            get_config = getattr(module, "get_current_vllm_config", None)
            _expect_gdn_variants(get_config() if callable(get_config) else None)

    setattr(__init__, _MARK, original)
    cls.__init__ = __init__
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


def _layout_moved(module: str, target: str) -> None:
    """vLLM's code moved under jitguard: say so once; vLLM then runs exactly as without jitguard."""
    log.warning(
        "jitguard: [jitguard-fault] %s has no %s as jitguard knows it (this vLLM moved it); the GDN prefill "
        "choice is vLLM's own, unguarded. Fix: upgrade jitguard (`pip install -U .` from a newer checkout).",
        module,
        target,
    )


_PATCHES: dict[str, Callable[[ModuleType, GdnGuard], bool]] = {
    CURRENT.module: _patch_current,
    SPRING_2026.module: _patch_op_init,
    MODEL_FILE.module: _patch_op_init,
}


def _unpatch(module: ModuleType) -> None:
    if module.__name__ == CURRENT.module:
        wrapped = getattr(module, CURRENT.target, None)
        if hasattr(wrapped, _MARK):
            setattr(module, CURRENT.target, getattr(wrapped, _MARK))
        return
    cls = module.__dict__.get("ChunkGatedDeltaRule")
    if cls is not None and hasattr(cls.__init__, _MARK):
        cls.__init__ = getattr(cls.__init__, _MARK)


def _apply(module: ModuleType) -> None:
    """Patch a freshly imported layout module; never let a surprise in vLLM's code break its import."""
    patched = shielded(
        f"patching {module.__name__}",
        "vLLM's GDN prefill choice is its own, unguarded",
        lambda: _PATCHES[module.__name__](module, _guard),
        lambda: False,
    )
    if patched:
        log.debug("jitguard: guarding the GDN prefill backend choice in %s", module.__name__)


class _LayoutImportHook(PostImportHook):
    """Patches a layout module as it is imported, without jitguard importing vLLM's model code in processes
    that never build a GDN model (a class of its own, so it can be told apart on ``sys.meta_path``)."""

    def __init__(self) -> None:
        super().__init__(_PATCHES, _apply)


# ---- the entry point --------------------------------------------------------------------------------------
_guard = GdnGuard()
_hook: _LayoutImportHook | None = None
_lock = threading.RLock()


def vllm_installed() -> bool:
    """Whether ``vllm`` can be imported here, without importing it."""
    try:
        return importlib.util.find_spec("vllm") is not None
    except (ImportError, ValueError):
        return False


def register(*, status: StatusProvider | None = None) -> bool:
    """The ``vllm.general_plugins`` entry point (idempotent). Returns whether jitguard now guards vLLM.

    ``status`` replaces how FlashInfer's status is obtained (default: ``jitguard.gdn.dispatch.backend_status``
    on this process's facts), e.g. ``lambda: backend_status("flashinfer", facts=facts)``. Never raises: vLLM
    does not catch a plugin's errors, and a misconfigured guard must not take serving down.
    """
    try:
        return _register(status)
    except Exception as exc:
        log.error(
            "jitguard: the vLLM plugin stays off in this process: %s", exc, exc_info=not _is_config(exc)
        )
        return False


def _register(status: StatusProvider | None) -> bool:
    global _hook
    if not vllm_installed():
        return False
    from jitguard.config import Settings

    if Settings.from_env().disabled:
        return False
    with _lock:
        if status is not None:
            _guard.set_status(status)
        if _hook is None:
            _route_logs()
            _hook = _LayoutImportHook()
            _hook.install()
            for name in _PATCHES:
                module = sys.modules.get(name)
                if module is not None:
                    _apply(module)
            _install_build_hook()
    return True


def unregister() -> None:
    """Undo ``register()`` in this process: vLLM's functions back, the import hook gone (tests; a process that
    wants stock behaviour again). The FlashInfer build hook stays (``jitguard.integrations.flashinfer``)."""
    global _hook
    with _lock:
        if _hook is not None:
            _hook.uninstall()
        _hook = None
        for name in _PATCHES:
            module = sys.modules.get(name)
            if module is not None:
                _unpatch(module)
        _guard.set_status(None)


def is_registered() -> bool:
    """Whether ``register()`` is in effect in this process."""
    return _hook is not None


def guard() -> GdnGuard:
    """This process's guard (what ``register()`` consults)."""
    return _guard


def _install_build_hook() -> None:
    try:
        import jitguard

        active = jitguard.install()
    except Exception:
        log.debug("jitguard: FlashInfer build hook not available", exc_info=True)
        return
    log.debug("jitguard: FlashInfer JIT build hook %s", "active" if active else "not active")


def _route_logs() -> None:
    """Show jitguard's log lines in vLLM's log, in vLLM's format: vLLM configures only its own 'vllm' logger,
    so without this jitguard's INFO lines (build progress, waits on another rank) would be lost. Does nothing
    when the application configured logging itself, or vLLM has not (yet)."""
    ours = logging.getLogger("jitguard")
    theirs = logging.getLogger("vllm")
    if ours.handlers or logging.getLogger().handlers or not theirs.handlers:
        return
    for handler in theirs.handlers:
        ours.addHandler(handler)
    ours.setLevel(theirs.level or logging.INFO)
    ours.propagate = False


def _is_config(exc: BaseException) -> bool:
    from jitguard.errors import UsageError

    return isinstance(exc, UsageError)
