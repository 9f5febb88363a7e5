"""Which module serves a FlashInfer GDN prefill call (nvcc era): one that holds the call's instance.

``route`` replaces ``get_gdn_prefill_module`` (which builds every instance) with a router that reads each
call's instance from its arguments and calls, in order: FlashInfer's full module when it is already there, a
partial module in FlashInfer's cache that holds it, or a new one (the model's expected set, else the instance
alone). Never worse than FlashInfer's own path: what it cannot read or build for a reason of its own goes
to the full module; a verdict about the machine propagates as the full build's would (docs/gdn_variants.md).
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Iterable
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

from jitguard.boundary import patches
from jitguard.boundary.failsafe import report_fault
from jitguard.config import Settings, read
from jitguard.errors import BuildFailed, ConfigError
from jitguard.facts.flashinfer import installed_version
from jitguard.gdn_variants.partial_module import build_variant_module, find_built, load_built
from jitguard.gdn_variants.variant_plan import (
    FULL_MODULE,
    Family,
    GdnVariant,
    VariantPlan,
    falls_back_to_full,
    family_for,
    plan_for,
    variant_of_call,
)

log = logging.getLogger("jitguard")
GETTER = "get_gdn_prefill_module"
Kernel = Callable[..., Any]
CallKey = tuple[Any, ...]

_lock = threading.RLock()
_router: GdnRouter | None = None
_expected: set[GdnVariant] = set()


def expect(variants: Iterable[GdnVariant], *, why: str = "") -> None:
    """Variants this process will call (e.g. from the model config): the first call of any of them builds
    the module for all of them at once. Known before FlashInfer is imported, so kept here until then."""
    added = set(variants) - _expected
    if not added:
        return
    with _lock:
        _expected.update(added)
    log.info(
        "jitguard: FlashInfer GDN prefill needs the instance(s) %s%s: unless FlashInfer's full module is built "
        "already, only those are built (JITGUARD_GDN_VARIANTS=all builds the full module)",
        ", ".join(v.suffix for v in sorted(added)),
        f" ({why})" if why else "",
    )


def expected() -> frozenset[GdnVariant]:
    return frozenset(_expected)


def router() -> GdnRouter | None:
    """The router installed in this process, if any."""
    return _router


class GdnRouter:
    """Serves ``gdn_prefill`` calls from partial modules, FlashInfer's full module where it must (see the
    module docstring). ``build`` (plan -> the loaded module's ``gdn_prefill``) and ``full_exists`` are the
    build stage's by default."""

    def __init__(
        self,
        version: str,
        family: Family,
        full: Callable[[], Any],
        *,
        build: Callable[[VariantPlan], Kernel] | None = None,
        full_exists: Callable[[], bool] | None = None,
        find_built: Callable[[GdnVariant], VariantPlan | None] | None = None,
    ) -> None:
        self.version = version
        self.family = family
        self._full_getter = full  # FlashInfer's own get_gdn_prefill_module
        self._build = build or _build_and_load
        self._full_exists = full_exists or _full_module_exists
        self._find_built = find_built or (lambda variant: _find_built(version, variant))
        self._by_key: dict[CallKey, Kernel] = {}
        self._by_variant: dict[GdnVariant, Kernel] = {}
        self._served: dict[str, tuple[GdnVariant, ...]] = {}  # module -> the variants it serves here
        self._full_kernel: Kernel | None = None
        self._use_full: str | None = None  # why every call goes to the full module, once decided
        self._warned: set[str] = set()
        self._lock = threading.RLock()

    # ---- the hot path -------------------------------------------------------------------------------------
    def gdn_prefill(self, *args: Any, **kwargs: Any) -> Any:
        kernel = None
        if not kwargs and len(args) == self.family.launcher_args:
            key = self._key(args)
            kernel = self._by_key.get(key) if key is not None else None
            if kernel is None and key is not None:
                kernel = self._resolve(key)
        if kernel is None:
            kernel = self._full()
        return kernel(*args, **kwargs)

    def _key(self, args: tuple[Any, ...]) -> CallKey | None:
        # FlashInfer's order: output, output_state, q, k, v, cu_seqlens, initial_state, g (alpha), beta,
        # scale, workspace[, state_checkpoints, checkpoint_cu_starts, checkpoint_every_n_tokens].
        try:
            q, v = args[2], args[4]
            checkpointing = bool(args[13] > 0) if self.family.has_checkpointing else False
            return (
                str(q.dtype),
                int(q.shape[1]),
                int(v.shape[1]),
                args[7] is not None,
                args[8] is not None,
                args[6] is not None,
                checkpointing,
            )
        except Exception:  # not arguments as jitguard knows them: FlashInfer's full module takes the call
            return None

    def _resolve(self, key: CallKey) -> Kernel | None:
        with self._lock:
            kernel = self._by_key.get(key)
            if kernel is None:
                dtype, hq, hv, has_alpha, has_beta, has_state, checkpointing = key
                variant = variant_of_call(
                    dtype,
                    hq,
                    hv,
                    has_alpha=has_alpha,
                    has_beta=has_beta,
                    has_initial_state=has_state,
                    checkpointing=checkpointing,
                    family=self.family,
                )
                kernel = self.kernel_for(variant) if variant is not None else self._full()
                self._by_key[key] = kernel
            return kernel

    # ---- choosing a module --------------------------------------------------------------------------------
    def kernel_for(self, variant: GdnVariant) -> Kernel:
        """The function that runs ``variant``: built and loaded now if needed (raises verdicts only)."""
        with self._lock:
            kernel = self._by_variant.get(variant)
            if kernel is None:
                kernel = self._serve(variant) or self._full()
                self._by_variant[variant] = kernel
            return kernel

    def prepare(self, variant: GdnVariant) -> None:
        """Build and load what serves ``variant`` now (the op does this at load time)."""
        self.kernel_for(variant)

    def modules(self) -> dict[str, tuple[GdnVariant, ...]]:
        """Partial modules serving calls in this process, and their variants (empty: none, or full only)."""
        with self._lock:
            return dict(self._served)

    def _serve(self, variant: GdnVariant) -> Kernel | None:
        """A partial module's function for ``variant``; None to take FlashInfer's full module."""
        if self._use_full is not None:
            return None
        try:
            if self._full_exists():
                self._use_full = "FlashInfer's full module is already built"
                log.debug("jitguard: %s; GDN prefill calls use it", self._use_full)
                return None
            plan = self._plan(variant)
            kernel = self._load(plan)
        except _NotPrebuilt:
            return None  # FLASHINFER_DISABLE_JIT and no partial module: FlashInfer's own path says so
        except BuildFailed as exc:
            codes = [f.code for f in exc.findings if f.blocking]
            if not falls_back_to_full(codes):
                raise  # a verdict: the full module, bigger, would meet the same cause
            self._warn_once(
                f"build:{variant.suffix}",
                f"jitguard: the partial FlashInfer GDN prefill module {exc.module} failed to build "
                f"[{', '.join(codes) or 'build-failed'}]; using FlashInfer's full module instead."
                + (f" Log: {exc.log_path}" if exc.log_path else ""),
            )
            return None
        except Exception as exc:
            self._fault(exc)
            return None
        for v in plan.variants:
            self._by_variant[v] = kernel
        self._served[plan.module] = plan.variants
        return kernel

    def _plan(self, variant: GdnVariant) -> VariantPlan:
        wanted = {v for v in expected() if (v.checkpointing is not None) == self.family.has_checkpointing}
        planned = plan_for(self.version, wanted if variant in wanted else {variant})
        if _library(planned).is_file():
            return planned
        return self._find_built(variant) or planned

    def _load(self, plan: VariantPlan) -> Kernel:
        total = self.family.full_tu_count
        already = "loading" if _library(plan).is_file() else "building"
        log.info(
            "jitguard: FlashInfer GDN prefill: %s %s, which holds only %s (%d of FlashInfer's %d files; its "
            "full module is not built). JITGUARD_GDN_VARIANTS=all builds the full module instead.",
            already,
            plan.module,
            "; ".join(v.describe() for v in plan.variants),
            plan.tu_count,
            total,
        )
        return self._build(plan)

    def _full(self) -> Kernel:
        """FlashInfer's own module (its own getter: through jitguard's build hook when installed)."""
        if self._full_kernel is None:
            self._full_kernel = self._full_getter().gdn_prefill
        return self._full_kernel

    def _warn_once(self, key: str, message: str) -> None:
        if key not in self._warned:
            self._warned.add(key)
            log.warning("%s", message)

    def _fault(self, exc: BaseException) -> None:
        report_fault(
            "jitguard's partial FlashInfer GDN prefill module",
            "FlashInfer's full module is used instead",
            exc,
        )


# ---- installing it in flashinfer.gdn_prefill -------------------------------------------------------------
def route(gdn_prefill: ModuleType) -> bool:
    """Route ``flashinfer.gdn_prefill``'s module getter through a router (idempotent). False, changing
    nothing, when the variants are off (``JITGUARD_DISABLE=1``, ``JITGUARD_GDN_VARIANTS=all``), this FlashInfer
    has no per-variant instances (not 0.6.3 - 0.6.13), or its getter is not there. Raises ConfigError for a
    malformed JITGUARD_* setting."""
    with _lock:
        if patches.is_wrapped(gdn_prefill, GETTER):
            return True
        if not callable(getattr(gdn_prefill, GETTER, None)):
            return False
        settings = Settings.from_env()
        if settings.disabled or settings.gdn_variants == "all":
            return False
        version = installed_version()
        family = family_for(version)
        if version is None or family is None:
            return False

        def routed_getter(current: Callable[[], Any]) -> Callable[[], Any]:
            global _router
            _router = GdnRouter(version, family, current)
            namespace = SimpleNamespace(gdn_prefill=_router.gdn_prefill)

            def get_gdn_prefill_module() -> Any:
                if _disabled_now():  # JITGUARD_DISABLE=1 set after routing: stock FlashInfer again
                    return current()
                return namespace

            get_gdn_prefill_module.__doc__ = current.__doc__
            get_gdn_prefill_module.cache_clear = getattr(current, "cache_clear", lambda: None)  # type: ignore[attr-defined]
            return get_gdn_prefill_module

        return patches.wrap(gdn_prefill, GETTER, routed_getter)


def unroute(gdn_prefill: ModuleType) -> None:
    """Put FlashInfer's own getter back (tests; a process that wants stock behaviour again)."""
    global _router
    with _lock:
        patches.undo(gdn_prefill, GETTER)
        _router = None


def is_routed(gdn_prefill: ModuleType) -> bool:
    return patches.is_wrapped(gdn_prefill, GETTER)


def _disabled_now() -> bool:
    try:
        return bool(read("JITGUARD_DISABLE"))
    except ConfigError:  # malformed: routing began with it valid (Settings.from_env); keep routing
        return False


# ---- the build stage's defaults (FlashInfer is imported: the router runs inside it) ----------------------
def _jit_dir() -> Path:
    from flashinfer.jit import env as jit_env

    return Path(jit_env.FLASHINFER_JIT_DIR)


def _library(plan: VariantPlan) -> Path:
    return _jit_dir() / plan.module / f"{plan.module}.so"


def _full_module_exists() -> bool:
    from flashinfer.jit import env as jit_env

    name = f"{FULL_MODULE}/{FULL_MODULE}.so"
    return (Path(jit_env.FLASHINFER_AOT_DIR) / name).is_file() or (_jit_dir() / name).is_file()


def _find_built(version: str, variant: GdnVariant) -> VariantPlan | None:
    return find_built(_jit_dir(), version, variant)


def _build_and_load(plan: VariantPlan) -> Kernel:
    if os.environ.get("FLASHINFER_DISABLE_JIT"):
        # No compiling allowed: a prebuilt partial module may still be loaded (checked first); else
        # FlashInfer's own path answers (its MissingJITCacheError).
        loaded = load_built(plan)
        if loaded is None:
            raise _NotPrebuilt(plan.module)
        return loaded.gdn_prefill
    built = build_variant_module(plan, load=True)
    return built.loaded.gdn_prefill


class _NotPrebuilt(LookupError):
    def __init__(self, module: str) -> None:
        super().__init__(f"FLASHINFER_DISABLE_JIT is set and {module} is not prebuilt")
