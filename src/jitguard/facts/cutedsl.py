"""What a compiled CuTeDSL kernel depends on, besides its own source: the DSL stack installed here.

``cute.compile`` generates code with the compiler in the ``nvidia-cutlass-dsl`` wheels (the Python package,
its ``-libs-base``/``-libs-core`` and the CUDA-family ``-libs-cu12``/``-libs-cu13`` with the MLIR and runtime
libraries) and, for TVM-FFI kernels, ``apache-tvm-ffi``; not the system CUDA toolkit. ``dsl_stack`` names each
of those distributions with its version and a digest of its RECORD, so a rebuilt wheel of the same version,
or another CUDA family, is another stack. Environment variables ``CUTE_DSL_*`` change what the DSL compiles
(arch, TVM-FFI, optimisation flags): ``dsl_environment`` lists them. Read once per process (the metadata walk
costs ~0.1 s in a large environment).
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import os
import sys
import sysconfig
from collections.abc import Mapping

STACK_PREFIXES = ("nvidia-cutlass-dsl",)
STACK_NAMES = frozenset({"apache-tvm-ffi"})
ENV_PREFIX = "CUTE_DSL_"


def _normal(name: str) -> str:
    return name.lower().replace("_", "-")


@functools.cache
def dsl_stack() -> tuple[str, ...]:
    """``name==version:<RECORD digest>`` for each installed distribution of the DSL stack, sorted, with the
    interpreter's ABI first; () when no DSL is installed."""
    stack = set()
    for dist in importlib.metadata.distributions():
        name = _normal(dist.metadata["Name"] or "")
        if name in STACK_NAMES or name.startswith(STACK_PREFIXES):
            record = (dist.read_text("RECORD") or "") + (dist.read_text("direct_url.json") or "")
            stack.add(f"{name}=={dist.version}:{hashlib.sha256(record.encode()).hexdigest()[:16]}")
    if not any(entry.startswith(STACK_PREFIXES) for entry in stack):
        return ()
    abi = f"python {sys.implementation.cache_tag} {sysconfig.get_config_var('SOABI')}"
    return (abi, *sorted(stack))


def dsl_environment(env: Mapping[str, str] | None = None) -> tuple[str, ...]:
    """``NAME=value`` of every ``CUTE_DSL_*`` variable set, sorted."""
    env = os.environ if env is None else env
    return tuple(sorted(f"{k}={v}" for k, v in env.items() if k.startswith(ENV_PREFIX)))
