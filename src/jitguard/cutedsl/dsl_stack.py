"""What a compiled CuTeDSL kernel depends on, besides its own source: the DSL stack installed here.

``cute.compile`` generates code with the compiler in the ``nvidia-cutlass-dsl`` wheels (the Python package,
its ``-libs-base``/``-libs-core`` and the CUDA-family ``-libs-cu12``/``-libs-cu13`` with the MLIR and runtime
libraries) and, for TVM-FFI kernels, ``apache-tvm-ffi``; not the system CUDA toolkit. ``dsl_stack`` names each
of those distributions with its version and a digest of its RECORD, so a rebuilt wheel of the same version,
or another CUDA family, is another stack; where the wheel came from (a path or URL in ``direct_url.json``) is
not part of it, so two hosts that installed the same wheel from different places agree. Environment variables
``CUTE_DSL_*`` change what the DSL compiles (arch, TVM-FFI, optimisation flags): ``dsl_environment`` lists
them, less those that only say where the DSL writes or what it logs (``OUTPUT_ONLY``), so a kernel key holds no
path and a cache moved to another root or host still hits. A variable not named there stays in the key.
Read once per process (the metadata walk costs ~0.1 s in a large environment).
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import json
import os
import sys
import sysconfig
from collections.abc import Mapping

STACK_PREFIXES = ("nvidia-cutlass-dsl",)
STACK_NAMES = frozenset({"apache-tvm-ffi"})
ENV_PREFIX = "CUTE_DSL_"
# The DSL's variables that change where it writes, what it logs or keeps beside the kernel, or whether it
# caches: never the generated code (read from nvidia-cutlass-dsl 4.3-4.8's env_manager, where each setting
# says whether it affects the compile). Anything else, an unknown name included, stays in the key.
OUTPUT_ONLY = frozenset(
    ENV_PREFIX + name
    for name in (
        "CACHE_DIR",
        "DUMP_DIR",
        "NO_CACHE",
        "DISABLE_FILE_CACHING",
        "JIT_CACHE_MAX_ELEMS",
        "LOG_TO_CONSOLE",
        "LOG_TO_FILE",
        "LOG_LEVEL",
        "LOG_AUTOTUNE",
        "JIT_TIME_PROFILING",
        "PRINT_IR",
        "PRINT_AFTER_PREPROCESSOR",
        "SHOW_STACKTRACE",
        "FILTER_STACKTRACE",
        "KEEP",
        "KEEP_IR",
        "KEEP_PTX",
        "KEEP_CUBIN",
        "KEEP_SASS",
        "WARNINGS_IGNORE",
        "ENABLE_OPTIMIZATION_WARNINGS",
    )
)


def _normal(name: str) -> str:
    return name.lower().replace("_", "-")


@functools.cache
def dsl_stack(path: tuple[str, ...] | None = None) -> tuple[str, ...]:
    """``name==version:<RECORD digest>`` for each installed distribution of the DSL stack (on ``path``, else
    sys.path), sorted, with the interpreter's ABI first; () when no DSL is installed."""
    stack = set()
    found = (
        importlib.metadata.distributions()
        if path is None
        else importlib.metadata.distributions(path=list(path))
    )
    for dist in found:
        name = _normal(dist.metadata["Name"] or "")
        if name in STACK_NAMES or name.startswith(STACK_PREFIXES):
            record = (dist.read_text("RECORD") or "") + _origin(dist.read_text("direct_url.json"))
            stack.add(f"{name}=={dist.version}:{hashlib.sha256(record.encode()).hexdigest()[:16]}")
    if not any(entry.startswith(STACK_PREFIXES) for entry in stack):
        return ()
    abi = f"python {sys.implementation.cache_tag} {sysconfig.get_config_var('SOABI')}"
    return (abi, *sorted(stack))


def _origin(direct_url: str | None) -> str:
    """What ``direct_url.json`` says about the bytes installed (an archive's hash, a VCS commit, editable or
    not), without its ``url``: a path or address that differs between hosts installing the same wheel."""
    if not direct_url:
        return ""
    try:
        data = json.loads(direct_url)
    except ValueError:
        return "direct_url: unreadable"
    if not isinstance(data, dict):
        return "direct_url: unreadable"
    data.pop("url", None)
    return json.dumps(data, sort_keys=True)


def dsl_environment(env: Mapping[str, str] | None = None) -> tuple[str, ...]:
    """``NAME=value`` of every ``CUTE_DSL_*`` variable set that may change the compiled code, sorted."""
    env = os.environ if env is None else env
    return tuple(
        sorted(f"{k}={v}" for k, v in env.items() if k.startswith(ENV_PREFIX) and k not in OUTPUT_ONLY)
    )
