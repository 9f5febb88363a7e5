"""SGLang plugin: guard SGLang's linear-attention kernel choice (GDN: Qwen3-Next, Qwen3.5) and every FlashInfer
JIT build in SGLang's processes.

SGLang's ``load_plugins()`` calls ``register()`` in each process that builds or configures an engine; it is cheap
and does nothing without SGLang or with ``JITGUARD_DISABLE=1``. It hooks the function of this release that sets
each phase's backend (``LAYOUTS``), and for each phase set to FlashInfer the process's ``ChoiceGuard`` decides:
the choice stands, moves to Triton with one warning, or (named by the user) stops the start at init. Any fault
of jitguard's own leaves SGLang's choice in place. The hooks per release: docs/sglang.md.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import logging
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

from jitguard.boundary import process_facts
from jitguard.boundary.failsafe import shielded
from jitguard.boundary.process_facts import collect_here
from jitguard.config import Settings
from jitguard.decision.sglang_phases import (
    BASE,
    FLASHINFER,
    OPTIONS,
    PHASE_CHOICES,
    PHASES,
    STASH,
    TRITON,
    flag,
    instead,
    named_by,
    option,
    request_of,
)
from jitguard.errors import ConfigError
from jitguard.integrations import IMPORT_STARTED, sglang_proof, sglang_ready, start_ledger
from jitguard.integrations.choices import Ask, ChoiceGuard
from jitguard.integrations.import_hooks import PostImportHook
from jitguard.status.engine_choices import gdn_status, status_of

if TYPE_CHECKING:
    from jitguard.facts import Facts

log = logging.getLogger("jitguard.sglang")

UTILS = "sglang.srt.layers.attention.linear.utils"
SERVER_ARGS = "sglang.srt.server_args"
RUNTIME_CONTEXT = "sglang.srt.runtime_context"
# The process-wide globals of 0.5.11-0.5.17, per phase.
GLOBALS = {"prefill": "LINEAR_ATTN_PREFILL_BACKEND", "decode": "LINEAR_ATTN_DECODE_BACKEND"}


@dataclass(frozen=True)
class Layout:
    """Where one family of SGLang releases decides its linear-attention kernels."""

    name: str
    function: str  # in UTILS
    phases: tuple[str, ...]
    releases: str
    # a process-wide layout's dict of the phases' backends in UTILS ("": one global per phase)
    table: str = ""

    @property
    def target(self) -> str:
        return f"{UTILS}.{self.function}"

    def found_in(self, utils: object) -> bool:
        """Whether SGLang's linear-attention module ``utils`` is of this layout."""
        if not callable(getattr(utils, self.function, None)):
            return False
        return not self.table or isinstance(getattr(utils, self.table, None), dict)

    def found_in_source(self, source: str) -> bool:
        """The same, read from the module's source (no import)."""
        return f"def {self.function}(" in source and (not self.table or f"\n{self.table}:" in source)


PER_RUNNER = Layout("per-runner", "resolve_linear_attn_backends", PHASES, "0.5.18+")
PROCESS_TABLE = Layout("process-wide table", "initialize_linear_attn_config", PHASES, "0.5.17", "_BACKENDS")
PROCESS_WIDE = Layout("process-wide", "initialize_linear_attn_config", ("prefill", "decode"), "0.5.11-0.5.16")
# The first found wins: the table layout before the globals (0.5.17 has both functions' names).
LAYOUTS = (PER_RUNNER, PROCESS_TABLE, PROCESS_WIDE)
REQUEST_HOOK = f"{SERVER_ARGS}.ServerArgs._handle_linear_attn_backend"  # <= 0.5.18


# ---- per-process state: one guard, one fault line -----------------------------------------------------------
ENGINE = "SGLang"
_guard = ChoiceGuard(ENGINE)
_faulted = False  # a fault of jitguard's own at SGLang's boundary: SGLang's choices stand from now on


def choose(chosen: Mapping[str, str], request: Mapping[str, object]) -> dict[str, str]:
    """phase -> the backend SGLang should use, for SGLang's choices ``chosen`` and the options as given
    (``request``). Raises ChoiceUnavailable for a FlashInfer asked for by name that cannot work."""
    asks = {}
    for phase, backend in chosen.items():
        if backend == FLASHINFER:
            named = named_by(phase, request)
            how = f"{named} {FLASHINFER}" if named else None
            asks[phase] = Ask(PHASE_CHOICES[phase], how, instead(phase, named or flag(option(phase))))
    kept = _guard.settle(list(asks.values()), asked="not asked for by name") if asks else {}
    return {p: TRITON if p in asks and not kept[asks[p].choice.key] else b for p, b in chosen.items()}


def _fail_safe(hook: Callable[..., Any]) -> Callable[..., Any]:
    """A hook body that never raises into SGLang, except for the refusal it means to raise. ``None`` is what
    SGLang's HookRegistry reads as "unchanged" (AFTER: SGLang's result; BEFORE: SGLang's arguments)."""

    def stock() -> None:
        global _faulted
        _faulted = True

    @functools.wraps(hook)
    def run(*args: Any, **kwargs: Any) -> Any:
        if _faulted:
            return None
        return shielded(
            "the SGLang plugin",
            "SGLang's linear-attention choices stand in this process, unchecked",
            lambda: hook(*args, **kwargs),
            stock,
        )

    return run


def _published_server_args() -> object:
    """The ServerArgs SGLang published for this process (0.5.18+), or None."""
    try:
        return importlib.import_module(RUNTIME_CONTEXT).get_context().server_args
    except Exception:
        return None


# ---- the hooks (registered with SGLang's HookRegistry) ----------------------------------------------------
@_fail_safe
def keep_request(server_args: Any, *args: Any, **kwargs: Any) -> None:
    """BEFORE ``ServerArgs._handle_linear_attn_backend`` (<= 0.5.18): keep the options as given."""
    setattr(server_args, STASH, {name: getattr(server_args, name, None) for name in OPTIONS})


@_fail_safe
def check_runner_backends(result: Any, *args: Any, **kwargs: Any) -> Any:
    """AFTER ``resolve_linear_attn_backends`` (0.5.18+): a corrected ``LinearAttnBackends``, or None."""
    chosen = {p: str(getattr(result, p).value) for p in PER_RUNNER.phases}
    backends = choose(chosen, request_of(_published_server_args()))
    changes = {p: type(getattr(result, p))(b) for p, b in backends.items() if b != chosen[p]}
    if not changes:
        return None
    import msgspec  # SGLang's LinearAttnBackends is a frozen msgspec Struct

    return msgspec.structs.replace(result, **changes)


@_fail_safe
def check_process_backends(result: Any, *args: Any, **kwargs: Any) -> None:
    """AFTER ``initialize_linear_attn_config(server_args, ...)`` (0.5.11-0.5.17): correct the process-wide
    choice where SGLang keeps it (the globals, or 0.5.17's ``_BACKENDS`` dict)."""
    server_args = args[0] if args else kwargs.get("server_args")
    utils = importlib.import_module(UTILS)
    table = getattr(utils, PROCESS_TABLE.table, None)
    if isinstance(table, dict):
        current = {p: table[p] for p in PROCESS_TABLE.phases if table.get(p) is not None}
    else:
        current = {p: getattr(utils, name) for p, name in GLOBALS.items()}
    chosen = {p: str(v.value) for p, v in current.items()}
    for p, b in choose(chosen, request_of(server_args)).items():
        if b == chosen[p]:
            continue
        if isinstance(table, dict):
            table[p] = type(current[p])(b)
        else:
            setattr(utils, GLOBALS[p], type(current[p])(b))


_HOOKS: dict[str, Callable[..., Any]] = {
    PER_RUNNER.name: check_runner_backends,
    PROCESS_TABLE.name: check_process_backends,
    PROCESS_WIDE.name: check_process_backends,
}


def installed_layout() -> Layout | None:
    """The layout of the SGLang in this process (imports SGLang's small linear-attention module, which SGLang
    has imported itself by the time it loads plugins), or None when it has none jitguard knows."""
    utils = importlib.import_module(UTILS)
    return next((layout for layout in LAYOUTS if layout.found_in(utils)), None)


def _overwrites_decode_option() -> bool:
    """Whether SGLang's ServerArgs overwrites the decode option in ``_handle_linear_attn_backend`` (<= 0.5.18)."""
    server_args = importlib.import_module(SERVER_ARGS)
    return callable(vars(getattr(server_args, "ServerArgs", object)).get("_handle_linear_attn_backend"))


# ---- the entry point --------------------------------------------------------------------------------------
_IMPORT_S = time.perf_counter() - IMPORT_STARTED  # the start ledger's ``import`` phase: the plugin's import
_lock = threading.RLock()
_layout: Layout | None = None
_backend_hook: PostImportHook | None = None


def sglang_installed() -> bool:
    """Whether ``sglang`` can be imported here, without importing it."""
    try:
        return importlib.util.find_spec("sglang") is not None
    except (ImportError, ValueError):
        return False


def register(*, facts: Facts | None = None) -> bool:
    """The ``sglang.srt.plugins`` entry point (idempotent). Returns whether jitguard now guards SGLang.

    ``facts`` replaces this process's facts for the verdicts (tests; a host described from elsewhere). Never
    raises: SGLang logs a plugin's exception and goes on, and so does this.
    """
    try:
        return _register(facts)
    except Exception as exc:
        # A malformed JITGUARD_* setting says all there is to say in its message; anything else is a bug.
        log.error(
            "jitguard: the SGLang plugin stays off in this process: %s",
            exc,
            exc_info=type(exc) is not ConfigError,
        )
        return False


def _register(facts: Facts | None) -> bool:
    global _layout
    if not sglang_installed():
        return False

    settings = Settings.from_env()  # this entry's, once: the guard and the restore read these
    if settings.disabled:
        return False
    with _lock:
        if facts is not None:
            process_facts.replace(lambda: facts)
            _guard.set_facts()
        _guard.use(settings)
        if _layout is not None:
            return True
        layout = installed_layout()
        if layout is None:
            log.debug("jitguard: %s has no linear-attention choice jitguard knows; not guarded", UTILS)
        else:
            from sglang.srt.plugins.hook_registry import HookRegistry, HookType

            HookRegistry.register(layout.target, _HOOKS[layout.name], HookType.AFTER)
            if _overwrites_decode_option():
                HookRegistry.register(REQUEST_HOOK, keep_request, HookType.BEFORE)
            _layout = layout
        _watch_backend()
        # FlashInfer's nvcc JIT builds in this process go through the supervised, shared build.
        # lazy: inside register()'s shield: a hook that cannot be imported leaves the plugin without it
        from jitguard.integrations.flashinfer_hook import install

        log.debug("jitguard: FlashInfer JIT build hook %s", "active" if install() else "not active")
    # lazy: the fleet (~15 modules) loads when used, not with the plugin's import
    from jitguard.fleet import warm_start

    start_ledger.begin("sglang", settings, import_s=_IMPORT_S)
    sglang_ready.watch()
    outcome = warm_start.restore_once(settings, engine="sglang")  # never raises; no-op without a store
    start_ledger.covered_by(outcome, "sglang", settings)
    return layout is not None


def _watch_backend() -> None:
    """jitguard's proof of FlashInfer GDN prefill in each GDN attention backend (``sglang_proof``): patched as
    SGLang imports its GDN backend module, or now where it already has."""
    global _backend_hook

    def apply(module: ModuleType) -> None:
        shielded(
            f"patching {module.__name__}",
            "SGLang's GDN prefill runs unproven",
            lambda: sglang_proof.watch(module, _guard),
            lambda: False,
        )

    if _backend_hook is None:
        _backend_hook = PostImportHook((sglang_proof.MODULE,), apply)
        _backend_hook.install()
    module = sys.modules.get(sglang_proof.MODULE)
    if module is not None:
        apply(module)


def is_registered() -> bool:
    """Whether ``register()`` put jitguard's hooks in SGLang's HookRegistry in this process."""
    return _layout is not None


def guard() -> ChoiceGuard:
    """This process's guard (what the hooks consult)."""
    return _guard


# ---- for `jitguard doctor --engine sglang` ------------------------------------------------------------------
DEFAULTS = {  # when SGLang picks FlashInfer for a phase by itself
    PROCESS_WIDE.name: {"prefill": "never", "decode": "on SM100 with --mamba-ssm-dtype bfloat16"},
    PROCESS_TABLE.name: {
        "prefill": "in its validated GDN domain (SM100 with CUDA 13)",
        "decode": "on SM100 with --mamba-ssm-dtype bfloat16",
        "verify": "when decode is FlashInfer (an unset verify follows decode)",
    },
    PER_RUNNER.name: {
        "prefill": "in its validated GDN domains (0.5.18: SM100 with CUDA 13; 0.5.19+: SM90 too)",
        "decode": "on SM100 with --mamba-ssm-dtype bfloat16",
        "verify": "when decode is FlashInfer (an unset verify follows decode)",
    },
}


def describe_choices(cache_dir: Path, *, facts: Facts | None = None) -> list[dict[str, Any]]:
    """SGLang's linear-attention choices here, one row per phase: the option, when SGLang picks FlashInfer on
    its own (else Triton), jitguard's verdict for FlashInfer in that phase and what the plugin then does.
    Reads SGLang's version and layout from its installed files without importing it."""

    version, layout = _installed_files()
    facts = facts or collect_here()
    gdn = gdn_status(facts, cache_dir)
    rows = []
    for phase in (layout or PER_RUNNER).phases:
        st = status_of(PHASE_CHOICES[phase], facts, cache_dir, gdn=gdn)
        blocking = list(st.blocking)
        rows.append(
            {
                "engine": "sglang",
                "sglang": version,
                "layout": layout.name if layout else None,
                "phase": phase,
                "option": flag(option(phase)),
                "also": flag(BASE),
                "sglang_picks_flashinfer": DEFAULTS[(layout or PER_RUNNER).name].get(phase),
                "flashinfer_usable": st.usable,
                "findings": [f.code for f in st.findings],
                "blocking": [f.code for f in blocking],
                "primary": blocking[0].to_json() if blocking else None,
                "when_sglang_picks_flashinfer": "flashinfer" if st.usable else "triton (one warning)",
                "when_named": "flashinfer" if st.usable else "stop at start-up",
            }
        )
    return rows


def _installed_files() -> tuple[str | None, Layout | None]:
    """SGLang's version and layout, read from its distribution's files (no import), or (None, None)."""
    from importlib import metadata

    try:
        dist = metadata.distribution("sglang")
        source = Path(str(dist.locate_file(UTILS.replace(".", "/") + ".py"))).read_text(encoding="utf-8")
    except (metadata.PackageNotFoundError, OSError):
        return None, None
    found = next((layout for layout in LAYOUTS if layout.found_in_source(source)), None)
    return dist.version, found
