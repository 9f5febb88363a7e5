"""Compile each FlashInfer CuTeDSL kernel once per host, not once per process (FlashInfer >= 0.6.14).

FlashInfer's GDN prefill kernels go through ``custom_compile_cache.cached_compile``, which keeps a kernel in
process memory only: every process, rank and restart compiles again. ``route`` puts a persisting one in its
place: keyed without paths (``kernel_key``), loaded from the kernel cache (``kernel_cache``) or the
store, else compiled once under a per-kernel lock and published. Kernels FlashInfer keeps in its own disk
cache are left to it. Any fault of the cache is one warning and FlashInfer's own compile (docs/cutedsl.md).
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

from jitguard.boundary import patches
from jitguard.boundary.failsafe import report_fault
from jitguard.config import Settings, format_duration
from jitguard.cutedsl import dsl_install, kernel_objects
from jitguard.cutedsl.compile_routes import persists_itself
from jitguard.cutedsl.dsl_checks import damage
from jitguard.cutedsl.kernel_cache import KernelCache, KernelKey
from jitguard.cutedsl.kernel_key import NotPersistable, describe, kernel_key
from jitguard.errors import LockTimeout, LockUnavailable
from jitguard.ledger import tally
from jitguard.locks.lock_dir import lock_dir
from jitguard.locks.visible_lock import ModuleLock, ensure_visible_logging

CACHE_MODULE = "flashinfer.gdn_kernels.delta_rule_dsl.custom_compile_cache"
FUNCTION = "cached_compile"
# A compile longer than this is logged as it happens ("compiling ..."), then with its duration.
VISIBLE_AFTER_S = 1.0
# Other ranks wait this long at most for one compile (seconds each, normally), then compile themselves.
MAX_WAIT_S = 600.0

log = logging.getLogger("jitguard.cutedsl")
_lock = threading.RLock()
_warned: set[str] = set()


def route(module: ModuleType) -> bool:
    """Replace ``module.cached_compile`` (FlashInfer's ``custom_compile_cache``) and every binding of it in an
    imported FlashInfer module with the persisting one. Idempotent; False, leaving FlashInfer as it is, when
    the module is not laid out as jitguard knows it, or the cache is off (JITGUARD_CUTEDSL_CACHE=0)."""
    settings = Settings.from_env()
    if settings.disabled or not settings.cutedsl_cache:
        return False
    with _lock:
        if patches.is_wrapped(module, FUNCTION):
            return True
        if _flashinfer_persists(module):
            _warn_once(
                "flashinfer-disk",
                "jitguard: this FlashInfer keeps these CuTeDSL kernels on disk itself (%s compiles through "
                "flashinfer.jit.cute_dsl_core); jitguard's kernel cache stands aside for them",
                module.__name__,
                level=logging.INFO,
            )
            return False
        current = getattr(module, FUNCTION, None)
        known = isinstance(getattr(module, "_in_mem_compile_cache", None), dict) and callable(
            getattr(module, "_compile_options_key", None)
        )
        if current is None or not callable(current) or not known:
            _warn_once(
                "layout",
                "jitguard: this FlashInfer's CuTeDSL compile cache is not laid out as jitguard knows it "
                "(%s.%s); its kernels are compiled in every process as without jitguard",
                module.__name__,
                FUNCTION,
            )
            return False
        return patches.wrap(
            module, FUNCTION, lambda original: _persisting(module, original), rebind_under="flashinfer"
        )


def _flashinfer_persists(module: ModuleType) -> bool:
    """Whether FlashInfer's compile cache writes to FlashInfer's own disk cache (``cutedsl.compile_routes``):
    then a kernel kept by jitguard too would be a second copy, so jitguard defers."""
    source = getattr(module, "__file__", None)
    return bool(source) and persists_itself(Path(str(source)))


def unroute(module: ModuleType) -> None:
    """Put FlashInfer's own ``cached_compile`` back everywhere (tests; ``jitguard.uninstall``)."""
    with _lock:
        patches.undo(module, FUNCTION, rebind_under="flashinfer")


def is_routed(module: ModuleType) -> bool:
    return patches.is_wrapped(module, FUNCTION)


def _persisting(module: ModuleType, original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def cached_compile(func: Any, *args: Any, compile_options: Any = None, **kwargs: Any) -> Any:
        def stock() -> Any:
            return original(func, *args, compile_options=compile_options, **kwargs)

        try:
            memory_key = (func._get_compile_key(), module._compile_options_key(compile_options))
            known = module._in_mem_compile_cache.get(memory_key)
        except Exception:  # FlashInfer's own key fails: let FlashInfer say so, as it would
            return stock()
        if known is not None:
            return known
        return _first_use(module, func, compile_options, memory_key, stock)

    return cached_compile


def _first_use(module: ModuleType, func: Any, options: Any, memory_key: Any, stock: Callable[[], Any]) -> Any:
    try:
        settings = Settings.from_env()
        if settings.disabled or not settings.cutedsl_cache:
            return stock()
        key = kernel_key(func, options, memory_key)
        cache = KernelCache(settings.cache_dir)
    except NotPersistable as exc:
        _warn_once("persist", "jitguard: %s; compiled in this process only", exc, level=logging.DEBUG)
        started = time.monotonic()
        compiled = _timed(stock, describe(func, options))
        tally.count(
            "cutedsl",
            "compiled",
            seconds=time.monotonic() - started,
            what=describe(func, options),
            cause=str(exc),
        )
        return compiled
    except Exception as exc:
        _fault("keying a CuTeDSL kernel", exc)
        return stock()

    started = time.monotonic()
    loaded = _load(cache, key)
    if loaded is not None:
        tally.count("cutedsl", "cached", seconds=time.monotonic() - started, what=key.name)
        module._in_mem_compile_cache[memory_key] = loaded
        return loaded
    lock = _take_lock(settings, key)
    if lock is not None:
        tally.phase("lock_waits", lock.waited)
    try:
        started = time.monotonic()
        loaded = _load(cache, key) if lock is not None else None  # published while we waited
        outcome = "cached"
        if loaded is None and settings.share_url:
            loaded = _fetch_shared(settings, cache, key)
            outcome = "restored"
        if loaded is not None:
            tally.count("cutedsl", outcome, seconds=time.monotonic() - started, what=key.name)
            module._in_mem_compile_cache[memory_key] = loaded
            return loaded
        compiled = _timed(stock, key.name)  # FlashInfer's errors are the caller's
        tally.count(
            "cutedsl",
            "compiled",
            seconds=time.monotonic() - started,
            what=key.name,
            cause=f"jitguard's kernel cache ({cache.root}) held no kernel for its key {key.digest[:16]}",
        )
        kept = _publish(cache, key, compiled)
        if kept is not None and settings.share_url and settings.share_publish:
            _publish_shared(settings, key, *kept)
        return compiled
    finally:
        if lock is not None:
            lock.release()


def _timed(compile: Callable[[], Any], name: str) -> Any:
    """``compile()``, said in the log when it takes over VISIBLE_AFTER_S: at that point, and when done."""
    ensure_visible_logging()
    start = time.monotonic()
    started = threading.Timer(
        VISIBLE_AFTER_S,
        lambda: log.info("jitguard: compiling the CuTeDSL kernel %s (first use on this host)...", name),
    )
    started.daemon = True
    started.start()
    try:
        result = compile()
    finally:
        started.cancel()
    took = time.monotonic() - start
    if took > VISIBLE_AFTER_S:
        log.info("jitguard: compiled the CuTeDSL kernel %s in %s", name, format_duration(took))
    return result


def _take_lock(settings: Settings, key: KernelKey) -> ModuleLock | None:
    """The per-kernel lock, held while one process compiles and publishes; None when it cannot be had (then
    this process compiles on its own: harmless, the first publish is kept)."""
    try:
        path = lock_dir(settings.cache_dir, "locks") / f"cutedsl-{key.digest[:24]}.lock"
        lock = ModuleLock(
            path,
            f"CuTeDSL kernel {key.name}",
            timeout=min(settings.lock_timeout, MAX_WAIT_S),
            report_interval=2.0,
        )
        lock.acquire()
    except (LockTimeout, LockUnavailable, OSError) as exc:
        _warn_once("lock", "jitguard: compiling %s without waiting for other processes: %s", key.name, exc)
        return None
    return lock


def _load(cache: KernelCache, key: KernelKey) -> Any:
    """The cached kernel, loaded; None on a miss or when it does not load (warned once, then compiled)."""
    try:
        lookup = cache.get(key)
        if lookup.entry is None:
            log.debug("jitguard: kernel cache miss for %s: %s", key.name, lookup.reason)
            return None
        start = time.monotonic()
        loaded = kernel_objects.load_object(lookup.entry)
    except Exception as exc:
        _fault(f"loading the cached CuTeDSL kernel {key.name}", exc)
        return None
    ensure_visible_logging()
    log.info(
        "jitguard: loaded the CuTeDSL kernel %s from the kernel cache in %s (no compile)",
        key.name,
        format_duration(time.monotonic() - start),
    )
    return loaded


def dsl_damage() -> str:
    """Why kernels compiled here must not be kept ('' when they may): the nvidia-cutlass-dsl files differ from
    their wheels' RECORD (``cutedsl.dsl_install``), so a kernel compiled now may not be what the key says, and
    would outlive the repair (the key holds the RECORDs, not the files)."""

    checked = dsl_install.probe(cache_dir=Settings.from_env().cache_dir)  # digests kept by pre-flight
    damaged = [f"{d.name} ({len(bad)} files)" for d in checked.dists if (bad := damage(d))]
    return ", ".join(damaged)


def _publish(cache: KernelCache, key: KernelKey, compiled: Any) -> tuple[bytes, str] | None:
    """Keep the compiled kernel in the kernel cache; its object and format when it may be shared (it loads
    back, and the DSL's install is as its wheels say), else None."""
    try:
        damaged = dsl_damage()
        if damaged:
            _warn_once(
                "damaged",
                "jitguard: not keeping CuTeDSL kernels compiled here: the nvidia-cutlass-dsl install differs "
                "from its wheels (%s; `jitguard doctor` says how to repair it)",
                damaged,
            )
            return None
        blob, format = kernel_objects.export_object(compiled, key.symbol)
        # A kernel that does not load back is not kept for others.
        kernel_objects.load_bytes(cache, key, blob, format)
        if cache.put(key, blob, format=format):
            log.info("jitguard: kept the CuTeDSL kernel %s for later processes (%s)", key.name, cache.root)
        return blob, format
    except Exception as exc:
        _fault(f"keeping the CuTeDSL kernel {key.name}", exc)
        return None


def _fetch_shared(settings: Settings, cache: KernelCache, key: KernelKey) -> Any:
    """The kernel another host compiled (``kernel_objects.fetch_shared``); None on a miss or any fault
    (warned once), then it is compiled."""
    try:
        return kernel_objects.fetch_shared(settings, cache, key)
    except Exception as exc:
        _fault(f"fetching the CuTeDSL kernel {key.name}", exc)
        return None


def _publish_shared(settings: Settings, key: KernelKey, blob: bytes, format: str) -> None:
    try:
        kernel_objects.publish_shared(settings, key, blob, format)
    except Exception as exc:
        _fault(f"publishing the CuTeDSL kernel {key.name}", exc)


def _fault(where: str, exc: BaseException) -> None:
    """One warning per process and kind of fault: jitguard's ``jitguard-fault`` finding, cause and fix."""
    then = "the kernel is compiled in this process, as without jitguard"
    report_fault(where, then, exc, once_per=f"cutedsl:{where.split(' ')[0]}")


def _warn_once(what: str, message: str, *args: Any, level: int = logging.WARNING) -> None:
    with _lock:
        if what in _warned:
            return
        _warned.add(what)
    log.log(level, message, *args)
