"""A compiled FlashInfer CuTeDSL kernel as bytes and back: exported with the DSL (``dump_to_object``, or
``export_to_c`` for a TVM-FFI kernel), loaded with the DSL's own loader (``cute.runtime.load_module``), and
carried between hosts through the artifact store (``JITGUARD_SHARE``) as FlashInfer's nvcc modules are.

Errors are raised to the caller (``persisting_compile``), which turns each into one warning and a local
compile.
"""

from __future__ import annotations

import logging
import os
import tempfile
import time
from pathlib import Path
from typing import Any

from jitguard.config import Settings
from jitguard.cutedsl.kernel_cache import FORMATS, KernelCache, KernelEntry, KernelKey
from jitguard.fleet.artifact_store import ArtifactKey
from jitguard.fleet.module_share import Share
from jitguard.fleet.signing import Trust

SHARED_MODULE = "cutedsl-kernel"  # the artifact store's module name for these kernels
log = logging.getLogger("jitguard.cutedsl")


def export_object(compiled: Any, symbol: str) -> tuple[bytes, str]:
    """The compiled kernel as an object file the DSL loads back, and its format."""
    if _is_tvm_ffi(compiled):
        with tempfile.TemporaryDirectory(prefix="jitguard-cutedsl-") as directory:
            path = Path(directory) / f"{symbol}.o"
            compiled.export_to_c(str(path), function_name=symbol)
            return path.read_bytes(), "tvm-ffi-object"
    return bytes(compiled.dump_to_object(symbol)), "cute-object"


def load_object(entry: KernelEntry) -> Any:
    """The kernel in ``entry``, loaded by the DSL: a function taking the same arguments as the compiled one.
    The verified bytes are loaded from a private copy, never from the cache file itself (a file swapped
    between the check and the load would not be the one checked)."""
    import cutlass.cute as cute

    with tempfile.TemporaryDirectory(prefix="jitguard-cutedsl-") as directory:
        path = Path(directory) / f"{entry.symbol}.o"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as handle:
            handle.write(entry.blob)
        module = cute.runtime.load_module(str(path), enable_tvm_ffi=entry.format == "tvm-ffi-object")
        return getattr(module, entry.symbol)


def load_bytes(cache: KernelCache, key: KernelKey, blob: bytes, format: str) -> Any:
    """``load_object`` for bytes not yet in the cache (just exported, or fetched): whether they load here."""
    return load_object(KernelEntry(key.digest, key.name, key.symbol, format, blob, time.time(), cache.root))


def _is_tvm_ffi(compiled: Any) -> bool:
    return any(cls.__name__.startswith("TVMFFI") for cls in type(compiled).__mro__)


def _share(settings: Settings, key: KernelKey) -> Any:

    # Signed and checked as every store document (fleet.signing): a kernel from an untrusted publisher is a
    # refusal, one warning, and a compile here.
    return Share(
        settings.share_url or "",
        ArtifactKey(SHARED_MODULE, key.digest, "object"),
        settings.share_timeout,
        Trust.from_settings(settings),
    )


def fetch_shared(settings: Settings, cache: KernelCache, key: KernelKey) -> Any:
    """The kernel another host compiled, fetched (sha256-verified by the store), loaded here, and kept in the
    kernel cache for later processes; None on a miss."""
    with tempfile.TemporaryDirectory(prefix="jitguard-cutedsl-fetch-") as directory:
        outcome = _share(settings, key).fetch(Path(directory))
        if outcome.action != "fetched" or len(outcome.files) != 1:
            return None
        name = outcome.files[0]
        format = name.removesuffix(".o")
        if format not in FORMATS:
            log.warning(
                "jitguard: the store holds %s for %s, not a kernel object; compiling it", name, key.name
            )
            return None
        blob = (Path(directory) / name).read_bytes()
    loaded = load_bytes(cache, key, blob, format)
    cache.put(key, blob, format=format)
    log.info(
        "jitguard: fetched the CuTeDSL kernel %s from the fleet (%d bytes, no compile)", key.name, len(blob)
    )
    return loaded


def publish_shared(settings: Settings, key: KernelKey, blob: bytes, format: str) -> None:
    """Offer a kernel compiled here to other hosts."""
    with tempfile.TemporaryDirectory(prefix="jitguard-cutedsl-publish-") as directory:
        path = Path(directory) / f"{format}.o"
        path.write_bytes(blob)
        _share(settings, key).publish({path.name: path}, {"name": key.name, "symbol": key.symbol})
