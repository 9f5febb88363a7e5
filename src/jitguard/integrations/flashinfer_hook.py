"""``jitguard.install()``: put FlashInfer's JIT builds under jitguard's supervision.

Applied to FlashInfer's own objects the moment ``flashinfer.jit.core`` is imported (an import hook, so
``install()`` never imports FlashInfer itself): ``JitSpec.build_and_load`` goes through the supervised, shared
build (nvcc modules only), ``run_ninja`` through jitguard's runner, the nvcc-era GDN prefill module getter
through a module of only the instances calls need (``gdn_variants``), and the CuTeDSL era's kernel compile
through jitguard's kernel cache (``cutedsl``). Every patch goes through ``boundary.patches``;
``JITGUARD_DISABLE=1`` makes it a no-op. Versions and switches: docs/design.md and docs/cutedsl.md.
"""

from __future__ import annotations

import functools
import importlib.metadata
import logging
import os
import sys
import threading
from collections.abc import Mapping
from types import ModuleType
from typing import Any

from jitguard.boundary import patches
from jitguard.boundary.failsafe import shielded
from jitguard.config import Settings
from jitguard.facts.flashinfer import ERA_CUTEDSL, ERA_NVCC, era_of
from jitguard.integrations.import_hooks import PostImportHook

log = logging.getLogger("jitguard.hook")

CORE_MODULE = "flashinfer.jit.core"
CPP_EXT_MODULE = "flashinfer.jit.cpp_ext"
GDN_MODULE = "flashinfer.gdn_prefill"
CUTEDSL_CACHE_MODULE = "flashinfer.gdn_kernels.delta_rule_dsl.custom_compile_cache"
_lock = threading.RLock()
_finder: _CoreImportHook | None = None
_patched: list[tuple[Any, str]] = []  # (owner, attribute) jitguard wrapped


def install() -> bool:
    """Activate the hook (idempotent). False when disabled (JITGUARD_DISABLE=1), when flashinfer is not
    installed, or when its version or layout is not one jitguard knows how to guard."""
    if Settings.from_env().disabled:
        return False
    if not supported_version(_flashinfer_version()):
        return False
    global _finder
    with _lock:
        if _finder is None:  # also when flashinfer.jit.core is in: flashinfer.gdn_prefill may come later
            _finder = _CoreImportHook()
            _finder.install()
        gdn = sys.modules.get(GDN_MODULE)
        if gdn is not None:
            _route_gdn(gdn)
        compile_cache = sys.modules.get(CUTEDSL_CACHE_MODULE)
        if compile_cache is not None:
            _route_cutedsl(compile_cache)
        core = sys.modules.get(CORE_MODULE)
        if core is not None:
            return _patch(core)
        return True


def uninstall() -> None:
    """Put FlashInfer back as it was (tests; a process that wants stock behaviour again)."""
    global _finder
    with _lock:
        if _finder is not None:
            _finder.uninstall()
        _finder = None
        for owner, attribute in _patched:
            patches.undo(owner, attribute, rebind_under="flashinfer")
        _patched.clear()
        gdn = sys.modules.get(GDN_MODULE)
        if gdn is not None:
            # lazy: the router loads with FlashInfer's GDN prefill module, not with the hook
            from jitguard.gdn_variants.module_router import unroute

            unroute(gdn)
        compile_cache = sys.modules.get(CUTEDSL_CACHE_MODULE)
        if compile_cache is not None:
            # lazy: the kernel cache loads with FlashInfer's CuTeDSL module, not with the hook
            from jitguard.cutedsl import persisting_compile

            persisting_compile.unroute(compile_cache)


def is_active() -> bool:
    """Whether FlashInfer's build_and_load is currently routed through jitguard."""
    return any(
        attribute == "build_and_load" and patches.is_wrapped(owner, attribute)
        for owner, attribute in _patched
    )


def supported_version(version: str | None) -> bool:
    if version is None:
        return False

    return era_of(version)[0] in (ERA_NVCC, ERA_CUTEDSL)


def _flashinfer_version() -> str | None:
    try:
        return importlib.metadata.version("flashinfer-python")
    except importlib.metadata.PackageNotFoundError:
        return None


def _patch(core: ModuleType) -> bool:
    with _lock:
        if is_active():
            return True
        spec_class = getattr(core, "JitSpec", None)
        cpp_ext = sys.modules.get(CPP_EXT_MODULE)
        required = (
            spec_class is not None
            and callable(getattr(spec_class, "build_and_load", None))
            and callable(getattr(spec_class, "build", None))
            and cpp_ext is not None
            and callable(getattr(cpp_ext, "run_ninja", None))
        )
        if not required:
            log.warning(
                "jitguard: this FlashInfer (%s) has no nvcc JitSpec.build_and_load/run_ninja as jitguard "
                "knows them; its JIT builds are not guarded",
                _flashinfer_version(),
            )
            return False
        # run_ninja in cpp_ext and wherever FlashInfer imported it by name (jit.core).
        for owner, attribute, make in (
            (spec_class, "build_and_load", _guarded_build_and_load),
            (cpp_ext, "run_ninja", _guarded_run_ninja),
        ):
            patches.wrap(owner, attribute, make, rebind_under="flashinfer")
            _patched.append((owner, attribute))
        return True


# What a hook body returns to say "do what FlashInfer does without jitguard".
_STOCK: Any = object()


def _guarded_build_and_load(original: Any) -> Any:
    @functools.wraps(original)
    def build_and_load(self: Any) -> Any:
        if not _is_nvcc_spec(self):  # a CuTeDSL kernel FlashInfer keeps on its own disk cache
            return original(self)

        def supervised() -> Any:
            # Stock behaviour when jitguard is switched off after install, for prebuilt (AOT) modules, and when
            # FlashInfer's JIT is disabled (it raises its own MissingJITCacheError, which callers expect).
            if Settings.from_env().disabled or self.is_aot or os.environ.get("FLASHINFER_DISABLE_JIT"):
                return _STOCK
            # lazy: the build stage loads when FlashInfer builds, not with the hook
            from jitguard.flashinfer_jit.flashinfer_build import build_spec

            return build_spec(self, load=self.load).loaded

        loaded = shielded(
            "the FlashInfer build hook", "FlashInfer builds and loads as without jitguard", supervised, _stock
        )
        return original(self) if loaded is _STOCK else loaded

    return build_and_load


def _is_nvcc_spec(spec: Any) -> bool:
    """Whether ``spec`` is one of FlashInfer's nvcc modules. From 0.6.18 one ``JitSpec`` base serves both its
    nvcc modules (``JitSpecNvcc``) and its CuTeDSL kernels (``JitSpecCuteDsl``, compiled in-process and kept
    in FlashInfer's own disk cache): only the nvcc ones are jitguard's to build; the others stay FlashInfer's,
    so no kernel is compiled or kept twice."""
    nvcc = getattr(sys.modules.get(CORE_MODULE), "JitSpecNvcc", None)
    return not isinstance(nvcc, type) or isinstance(spec, nvcc)


def _guarded_run_ninja(original: Any) -> Any:
    @functools.wraps(original)
    def run_ninja(workdir: Any, ninja_file: Any, verbose: bool = False, *args: Any, **kwargs: Any) -> None:
        def supervised() -> Any:
            if Settings.from_env().disabled or args or kwargs:
                return _STOCK
            # lazy: the build stage loads when FlashInfer builds, not with the hook
            from jitguard.flashinfer_jit.flashinfer_build import run_ninja_for_flashinfer

            run_ninja_for_flashinfer(workdir, ninja_file, verbose)
            return None

        ran = shielded("the FlashInfer ninja hook", "ninja runs as FlashInfer starts it", supervised, _stock)
        if ran is _STOCK:
            return original(workdir, ninja_file, verbose, *args, **kwargs)
        return None

    return run_ninja


def _stock() -> Any:
    return _STOCK


def _on_import(module: ModuleType) -> None:
    # An installed hook stays on sys.meta_path; JITGUARD_DISABLE=1 set afterwards still means stock FlashInfer.
    if module.__name__ == GDN_MODULE:
        _route_gdn(module)
        return
    if module.__name__ == CUTEDSL_CACHE_MODULE:
        if not Settings.from_env().disabled:
            _route_cutedsl(module)
        return

    def patch() -> bool:
        return not Settings.from_env().disabled and _patch(module)

    shielded("patching FlashInfer's JIT", "FlashInfer's builds are not guarded", patch, lambda: False)


def _route_gdn(module: ModuleType) -> bool:
    def route() -> bool:
        # lazy: the router loads with FlashInfer's GDN prefill module, not with the hook
        from jitguard.gdn_variants.module_router import route

        return route(module)

    return shielded(
        "routing FlashInfer's GDN prefill", "FlashInfer builds its full GDN module", route, lambda: False
    )


def _route_cutedsl(module: ModuleType) -> bool:
    def route() -> bool:
        # lazy: the kernel cache loads with FlashInfer's CuTeDSL module, not with the hook
        from jitguard.cutedsl import persisting_compile

        return persisting_compile.route(module)

    return shielded(
        "routing FlashInfer's CuTeDSL compile cache",
        "FlashInfer compiles its CuTeDSL kernels in every process",
        route,
        lambda: False,
    )


def expect_gdn_variants(
    config: Mapping[str, Any], dtype: str | None, settings: Settings, *, source: str
) -> tuple[str, ...]:
    """Tell the GDN router which instances an engine will call, from the model config and the serving dtype,
    before the first call (the first call then builds them all at once). Returns their names; () when the
    variants are off (the engine entry's ``settings``), this FlashInfer has none, or the config does not say
    (the first call decides then)."""
    # lazy: the router loads with FlashInfer's GDN prefill module, not with the hook
    from jitguard.gdn_variants.module_router import expect

    # lazy: the variant plan loads with a model config, not with the hook
    from jitguard.gdn_variants.variant_plan import (
        VariantError,
        family_for,
        model_gdn_from_config,
        variants_for_model,
    )

    family = family_for(_flashinfer_version())
    if settings.disabled or settings.gdn_variants == "all" or family is None:
        return ()
    try:
        planned = variants_for_model(model_gdn_from_config(config, source=source), family, dtype=dtype)
    except VariantError as exc:
        log.debug("jitguard: no GDN variants from %s: %s", source, exc)
        return ()
    expect(planned.variants, why=f"from {source}")
    return tuple(v.suffix for v in planned.variants)


class _CoreImportHook(PostImportHook):
    """Patches ``flashinfer.jit.core``, ``flashinfer.gdn_prefill`` and FlashInfer's CuTeDSL compile cache as
    they are imported (a class of its own, so it can be told apart on ``sys.meta_path``)."""

    def __init__(self) -> None:
        super().__init__((CORE_MODULE, GDN_MODULE, CUTEDSL_CACHE_MODULE), _on_import)
