"""What makes one compiled FlashInfer CuTeDSL kernel what it is: the kernel cache's key.

FlashInfer's version and the kernel's source file, FlashInfer's own compile key and options, the GPU arch, the
DSL stack (``dsl_stack``) and the ``CUTE_DSL_*`` variables that change code (not the DSL's cache or dump
dir, nor its log settings). Nothing in it names a path, so a cache root moved or copied to another host with
the same stack hits. A compile key that does not read the same in another process (an object's address in
it) cannot be persisted: ``NotPersistable``, and the kernel is compiled as without jitguard.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import inspect
import os
from pathlib import Path
from typing import Any

from jitguard.cutedsl.dsl_stack import dsl_environment, dsl_stack
from jitguard.cutedsl.kernel_cache import KernelKey

KEY_VERSION = "2"  # 2: no path in the key (a cache dir, a wheel's origin URL); a moved cache hits


class NotPersistable(Exception):
    """This kernel's compile key cannot be written down stably; it is compiled as without jitguard."""


def kernel_key(func: Any, options: Any, memory_key: Any) -> KernelKey:
    """Everything that makes this compiled kernel what it is. Raises NotPersistable when FlashInfer's compile
    key does not read the same in another process (an object's address in its text)."""
    kernel_text = repr(memory_key)
    if " at 0x" in kernel_text or "<locals>" in kernel_text:
        raise NotPersistable(f"the compile key of {type(func).__name__} names a process-local object")
    stack = dsl_stack()
    if not stack:
        raise NotPersistable("no nvidia-cutlass-dsl distribution is installed")
    try:
        source = inspect.getsourcefile(type(func))
    except (OSError, TypeError):
        source = None
    if source is None or not os.path.isfile(source):
        raise NotPersistable(f"the source of {type(func).__name__} cannot be found")
    material = {
        "key_version": KEY_VERSION,
        "flashinfer": _version("flashinfer-python"),
        "kernel_source": _file_digest(source),
        "kernel": kernel_text,
        "arch": _arch(options),
        "dsl": ";".join(stack),
        "dsl_env": ";".join(dsl_environment()),
    }
    return KernelKey(name=describe(func, options), material=material)


def describe(func: Any, options: Any) -> str:
    """``_FullyFusedDeltaRuleSm90(bf16, alpha, beta, init_state)``: the class and what is switched on."""
    attrs = getattr(func, "__dict__", {})
    on = [
        name.removeprefix("needs_")
        for name, value in attrs.items()
        if name.startswith("needs_") and value is True
    ]
    dtype = attrs.get("dtype") or attrs.get("io_dtype")
    parts = ([getattr(dtype, "__name__", str(dtype))] if dtype is not None else []) + on
    return f"{type(func).__name__}({', '.join(parts)})"


def _arch(options: Any) -> str:
    """The GPU arch the kernel is compiled for: the GPUArch option, else CUTE_DSL_ARCH, else the device's."""
    for option in options if isinstance(options, tuple) else (options,):
        if type(option).__name__ == "GPUArch" and getattr(option, "value", None):
            return str(option.value)
    if os.environ.get("CUTE_DSL_ARCH"):
        return os.environ["CUTE_DSL_ARCH"]
    import torch

    major, minor = torch.cuda.get_device_capability()
    return f"sm_{major}{minor}{'a' if major >= 9 else ''}"


@functools.cache
def _file_digest(path: str) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def _version(dist: str) -> str:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"
