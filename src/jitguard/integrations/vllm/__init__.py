"""vLLM plugin: guard every place where vLLM chooses a FlashInfer JIT path, and every FlashInfer JIT build in
the engine.

vLLM calls ``register()`` (the ``vllm.general_plugins`` entry point) in every process it starts; it imports
neither vLLM nor torch nor FlashInfer and does nothing without vLLM or with ``JITGUARD_DISABLE=1``. It patches
each choice site as its module is imported (``SITES``: GDN prefill, sampler, attention, MoE and FlashInfer's
other gates), installs the supervised FlashInfer build hook, keys vLLM's compile cache the same on every host
(``compile_key``), and restores (and, once ready, saves) the fleet's warm snapshot where a store is configured. What each site does per release: docs/vllm.md, "Supported vLLM versions".
"""

from __future__ import annotations

import importlib.util
import logging
import sys
import threading
import time
from collections.abc import Callable
from types import ModuleType
from typing import TYPE_CHECKING

from jitguard.boundary import process_facts
from jitguard.boundary.failsafe import shielded
from jitguard.config import Settings
from jitguard.decision.engine_verdicts import normalise_request
from jitguard.errors import UsageError
from jitguard.integrations import IMPORT_STARTED, start_ledger
from jitguard.integrations.choices import ChoiceGuard
from jitguard.integrations.import_hooks import PostImportHook
from jitguard.integrations.vllm import (
    attention,
    compile_key,
    coverage,
    gdn_prefill,
    predicates,
    sampler,
    warm_hooks,
    worker_ready,
)
from jitguard.integrations.vllm.gdn_prefill import LAYER_INIT_SITE, LAYOUTS, MODEL_FILE, RESOLVER_SITE, Layout
from jitguard.integrations.vllm.sites import Site, route_logs
from jitguard.status.engine_choices import gdn_status

if TYPE_CHECKING:
    from jitguard.decision.gdn_resolution import BackendStatus
    from jitguard.facts import Facts

__all__ = [
    "LAYER_INIT_SITE",
    "LAYOUTS",
    "MODEL_FILE",
    "RESOLVER_SITE",
    "SITES",
    "Layout",
    "default_status",
    "guard",
    "is_registered",
    "normalise_request",
    "register",
    "unregister",
]

log = logging.getLogger("jitguard.vllm")
ENGINE = "vLLM"
SITES: tuple[Site, ...] = (*gdn_prefill.SITES, *sampler.SITES, *attention.SITES, *predicates.SITES)
_BY_MODULE: dict[str, tuple[Site, ...]] = {}
for _site in SITES:
    _BY_MODULE[_site.module] = (*_BY_MODULE.get(_site.module, ()), _site)

_guard = ChoiceGuard(ENGINE)
_hook: _SiteImportHook | None = None
_lock = threading.RLock()


def engine_facts() -> process_facts.ProcessFacts:
    """The facts every choice in this process is judged on (collected once, within the pre-flight deadline)."""
    return process_facts.process_facts()


def default_status() -> BackendStatus:
    """FlashInfer GDN prefill's status on this process's facts: the pre-flight of the GDN op's FlashInfer
    backend plus the recorded failures (what the guard judges GDN prefill on unless ``register(status=...)``)."""
    return gdn_status(engine_facts().get(), _guard.settings.cache_dir)


def _apply(module: ModuleType) -> None:
    """Patch a freshly imported module at every site it holds; never let a surprise in vLLM's code break its
    import."""
    for site in _BY_MODULE.get(module.__name__, ()):
        patched = shielded(
            f"patching {module.__name__}",
            f"vLLM's {site.choice.title} choice is its own, unguarded",
            lambda site=site: site.apply(module, _guard),  # type: ignore[misc]
            lambda: False,
        )
        if patched:
            log.debug("jitguard: guarding %s in %s.%s", site.choice.title, module.__name__, site.target)


class _SiteImportHook(PostImportHook):
    """Patches a site's module as it is imported, without jitguard importing vLLM's code in processes that
    never use it (a class of its own, so it can be told apart on ``sys.meta_path``)."""

    def __init__(self) -> None:
        super().__init__(_BY_MODULE, _apply)


# ---- the entry point --------------------------------------------------------------------------------------
def vllm_installed() -> bool:
    """Whether ``vllm`` can be imported here, without importing it."""
    try:
        return importlib.util.find_spec("vllm") is not None
    except (ImportError, ValueError):
        return False


def register(
    *,
    status: Callable[[], BackendStatus] | None = None,
    facts: Callable[[], Facts] | None = None,
) -> bool:
    """The ``vllm.general_plugins`` entry point (idempotent). Returns whether jitguard now guards vLLM.

    ``status`` replaces how FlashInfer GDN prefill's status is obtained (default: the GDN op's status on the
    facts below, plus the recorded failures of FlashInfer's GDN modules); ``facts`` how this process's facts
    are collected (default: ``jitguard.facts.collect``, once). Never raises: vLLM does not catch a plugin's
    errors, and a misconfigured guard must not take serving down.
    """
    try:
        return _register(status, facts)
    except Exception as exc:
        log.error(
            "jitguard: the vLLM plugin stays off in this process: %s", exc, exc_info=not _is_config(exc)
        )
        return False


def _register(status: Callable[[], BackendStatus] | None, facts: Callable[[], Facts] | None) -> bool:
    global _hook
    if not vllm_installed():
        return False

    settings = Settings.from_env()
    if settings.disabled:
        return False
    with _lock:
        if facts is not None:
            process_facts.replace(facts)
        if facts is not None or status is not None:
            _guard.set_facts(gdn=status)
        _guard.use(settings)
        if _hook is None:
            route_logs()
            shielded("checking vLLM's release", "nothing said about it", coverage.say_once, lambda: None)
            _hook = _SiteImportHook()
            _hook.install()
            for name in _BY_MODULE:
                module = sys.modules.get(name)
                if module is not None:
                    _apply(module)
            _install_build_hook()
            if settings.warm != "off":
                compile_key.relocatable()
            warm_hooks.save_when_ready(settings)
            worker_ready.watch()
    start_ledger.begin(ENGINE.lower(), settings, import_s=_IMPORT_S)
    start_ledger.covered_by(warm_hooks.restore_before_start(settings), ENGINE.lower(), settings)
    return True


def unregister() -> None:
    """Undo ``register()`` in this process: vLLM's functions back, the import hook gone (tests; a process that
    wants stock behaviour again). The FlashInfer build hook stays (``jitguard.integrations.flashinfer_hook``)."""
    global _hook
    with _lock:
        if _hook is not None:
            _hook.uninstall()
        _hook = None
        for site in SITES:
            module = sys.modules.get(site.module)
            if module is not None:
                site.undo(module)
        process_facts.replace()
        _guard.set_facts()
        warm_hooks.undo()
        compile_key.undo()
        worker_ready.undo()
        start_ledger.undo()
        coverage.forget()


def is_registered() -> bool:
    """Whether ``register()`` is in effect in this process."""
    return _hook is not None


def guard() -> ChoiceGuard:
    """This process's guard of every FlashInfer choice vLLM makes (GDN prefill included)."""
    return _guard


def _install_build_hook() -> None:
    try:
        # lazy: inside the shield: a hook that cannot be imported leaves the plugin without it
        from jitguard.integrations.flashinfer_hook import install

        active = install()
    except Exception:
        log.debug("jitguard: FlashInfer build hook not available", exc_info=True)
        return
    log.debug("jitguard: FlashInfer JIT build hook %s", "active" if active else "not active")


_IMPORT_S = time.perf_counter() - IMPORT_STARTED  # the start ledger's ``import`` phase: the plugin's import


def _is_config(exc: BaseException) -> bool:
    return isinstance(exc, UsageError)
