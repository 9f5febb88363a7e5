"""What the ledger reads from each tool's own hooks and counters (never from its log lines), given the tool's
module objects by the engine integration that found them; nothing here imports a tool.

| layer | read from | versions |
|---|---|---|
| ``triton`` | ``triton.knobs.compilation.listener`` (called per kernel with ``cache_hit`` and the compile times), chained with a listener already set | Triton 3.4+ (its knobs); older Triton: not counted, said in the record's notes |
| ``triton-autotune`` | ``Autotuner.check_disk_cache`` (wrapped: True = results loaded, False = benchmarked) | Triton 3.4+, where ``TRITON_CACHE_AUTOTUNING=1`` (vLLM turns it on) |
| ``inductor`` | ``torch._dynamo.utils.counters``: ``inductor.fxgraph_cache_{hit,miss,bypass}``; seconds from ``compilation_time_metrics['OutputGraph.call_user_compiler']`` | torch 2.4+ |
| ``torch-compile`` (vLLM) | ``vllm.compilation.counter.compilation_counter`` (``num_inductor_compiles``, ``num_aot_compiles``, ``num_compiled_artifacts_loaded``, ``num_aot_artifacts_loaded``); seconds from ``compilation_config.compilation_time`` | vLLM 0.21+ (fields absent in a release read as 0) |

Counters are read as the difference between ``begin`` and ready, so what a process compiled before the engine
started (a test, a notebook) is not this start's.
"""

from __future__ import annotations

import functools
import os
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from jitguard import fileio
from jitguard.boundary import patches
from jitguard.ledger import tally

INDUCTOR_COMPILED = (("inductor", "fxgraph_cache_miss"), ("inductor", "fxgraph_cache_bypass"))
# An AOTAutograd cache hit loads its graph through the FX graph cache, which counts the hit: counted once.
INDUCTOR_CACHED = (("inductor", "fxgraph_cache_hit"),)
INDUCTOR_SECONDS = "OutputGraph.call_user_compiler"
# vLLM's compilation counter module (later releases moved it, keeping the old name as an alias).
VLLM_COUNTER_MODULES = ("vllm.compilation.counter", "vllm.backends.compiler.counter")
VLLM_COMPILED = ("num_inductor_compiles", "num_aot_compiles")
VLLM_CACHED = ("num_compiled_artifacts_loaded", "num_aot_artifacts_loaded")
_MARK = "__jitguard_ledger__"


# ---- Triton ------------------------------------------------------------------------------------------------
def watch_triton(knobs: Any, autotuner: Any = None) -> str:
    """Count Triton's kernels through its compilation listener (and autotune runs through ``autotuner``, the
    ``triton.runtime.autotuner`` module, where given); what was installed, as a note for the record."""
    compilation = getattr(knobs, "compilation", None)
    if compilation is None or not hasattr(compilation, "listener"):
        return "Triton: this release has no compilation listener (3.4+ has one): its kernels are not counted"
    previous = compilation.listener
    if not getattr(previous, _MARK, False):
        compilation.listener = _listener(previous, cache_dir=_triton_cache_dir(knobs))
    said = "Triton: kernels counted through knobs.compilation.listener"
    cls = getattr(autotuner, "Autotuner", None)
    if cls is not None and callable(getattr(cls, "check_disk_cache", None)):
        patches.wrap(cls, "check_disk_cache", _counted_autotune)
        said += ", autotune runs through Autotuner.check_disk_cache"
    return said


def _triton_cache_dir(knobs: Any) -> str:
    try:
        return str(knobs.cache.dir)
    except Exception:
        return os.environ.get("TRITON_CACHE_DIR", "~/.triton/cache")


def _listener(previous: Callable[..., Any] | None, *, cache_dir: str) -> Callable[..., Any]:
    def listener(
        *, src: Any = None, metadata: Any = None, times: Any = None, cache_hit: bool = False, **kwargs: Any
    ) -> None:
        try:
            seconds = float(getattr(times, "total", 0) or 0) / 1e6  # Triton gives microseconds
            name = str(getattr(src, "name", "") or "kernel")
            full = str((metadata or {}).get("hash", "")) if isinstance(metadata, Mapping) else ""
            tally.count(
                "triton",
                "cached" if cache_hit else "compiled",
                seconds=seconds,
                what=name,
                cause=functools.partial(triton_miss_cause, cache_dir, name, full),
            )
        except Exception:
            pass  # counting never breaks a compile
        if previous is not None:
            previous(src=src, metadata=metadata, times=times, cache_hit=cache_hit, **kwargs)

    setattr(listener, _MARK, True)
    return listener


def triton_miss_cause(cache_dir: str, name: str, key: str) -> str:
    """Why Triton compiled kernel ``name`` (its ``key``, the metadata's hash) although its cache was restored:
    whether the cache holds other builds of the same kernel. It does when an argument Triton specializes on
    (a ``tl.constexpr``'s value, an integer's divisibility by 16) differed from the start that filled it."""
    where = (
        f"Triton's cache ({cache_dir}) has no kernel for its key {key[:16]}" if key else "Triton compiled it"
    )
    root = Path(os.path.expanduser(cache_dir))
    others = 0
    try:
        with os.scandir(root) as entries:
            for entry in entries:
                # the metadata of each build, read the trusted way (a link or a FIFO planted there is a miss)
                metadata = fileio.read_json(Path(entry.path) / f"{name}.json", root=root)
                if metadata is not None and str(metadata.get("hash", "")) != key:
                    others += 1
    except OSError:
        return where
    if not others:
        return f"{where}, nor any other build of {name}: the start that filled it never compiled this kernel"
    return (
        f"{where}, but {others} other build{'s' if others != 1 else ''} of {name}: an argument Triton "
        "specializes on (a tl.constexpr's value, an integer's divisibility by 16) differed from the start that "
        "filled it; a constexpr that holds a size measured at start (vLLM's mamba conv1d kernels take the "
        "number of cache lines) differs between hosts unless that size is pinned (kv_cache_memory_bytes)"
    )


def _counted_autotune(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def check_disk_cache(self: Any, tuning_key: Any, configs: Any, bench_fn: Any) -> Any:
        started = time.perf_counter()
        loaded = original(self, tuning_key, configs, bench_fn)
        try:
            name = str(getattr(getattr(self, "base_fn", None), "__name__", "") or "kernel")
            tally.count(
                "triton-autotune",
                "cached" if loaded else "compiled",
                seconds=time.perf_counter() - started,
                what=f"{name} {tuning_key}",
                cause="Triton's cache holds no autotune results for this kernel, key and config list",
            )
        except Exception:
            pass
        return loaded

    return check_disk_cache


# ---- Inductor ----------------------------------------------------------------------------------------------
def inductor_readings() -> dict[str, float] | None:
    """Inductor's cache counters and compile seconds now, or None when torch has not been imported (nothing
    is imported to ask)."""
    utils = sys.modules.get("torch._dynamo.utils")
    counters = getattr(utils, "counters", None)
    if counters is None:
        return None
    readings: dict[str, float] = {}
    for group, name in (*INDUCTOR_COMPILED, *INDUCTOR_CACHED):
        readings[f"{group}.{name}"] = float(counters.get(group, {}).get(name, 0))
    metrics = getattr(utils, "compilation_time_metrics", {}) or {}
    readings["seconds"] = float(sum(metrics.get(INDUCTOR_SECONDS, ()) or ()))
    return readings


def count_inductor(before: Mapping[str, float] | None, cache_dir: str) -> None:
    """Count what Inductor did since ``before`` (None: since torch was imported)."""
    now = inductor_readings()
    if now is None:
        return
    base = before or {}
    delta = {k: max(0.0, v - base.get(k, 0.0)) for k, v in now.items()}
    compiled = int(sum(delta[f"{g}.{n}"] for g, n in INDUCTOR_COMPILED))
    cached = int(sum(delta[f"{g}.{n}"] for g, n in INDUCTOR_CACHED))
    seconds = delta["seconds"]
    share = seconds * compiled / (compiled + cached) if compiled + cached else 0.0
    tally.count(
        "inductor",
        "compiled",
        n=compiled,
        seconds=share,
        what=f"{compiled} FX graph(s)",
        cause=f"Inductor's FX graph cache ({cache_dir}) held no graph for their keys (Inductor does not say which "
        "part of a key differed; TORCH_LOGS=+inductor logs the key's components)",
    )
    tally.count("inductor", "cached", n=cached, seconds=seconds - share)


# ---- vLLM's torch.compile ---------------------------------------------------------------------------------
def vllm_readings() -> dict[str, float] | None:
    """vLLM's compilation counter now, or None when vLLM's compilation package is not loaded."""
    counter = next(
        (
            getattr(sys.modules[name], "compilation_counter", None)
            for name in VLLM_COUNTER_MODULES
            if name in sys.modules
        ),
        None,
    )
    if counter is None:
        return None
    return {name: float(getattr(counter, name, 0) or 0) for name in (*VLLM_COMPILED, *VLLM_CACHED)}


def count_vllm(before: Mapping[str, float] | None, compilation_config: Any = None) -> None:
    """Count what vLLM's torch.compile did since ``before``, with its own compile time where
    ``compilation_config`` (the engine's ``CompilationConfig``) has it."""
    now = vllm_readings()
    if now is None:
        return
    base = before or {}
    compiled = int(sum(max(0.0, now[k] - base.get(k, 0.0)) for k in VLLM_COMPILED))
    cached = int(sum(max(0.0, now[k] - base.get(k, 0.0)) for k in VLLM_CACHED))
    seconds = float(getattr(compilation_config, "compilation_time", 0.0) or 0.0)
    tally.count(
        "torch-compile",
        "compiled",
        n=compiled,
        seconds=seconds if compiled else 0.0,
        what=f"{compiled} piecewise graph(s)",
        cause=vllm_miss_cause(compilation_config),
    )
    tally.count("torch-compile", "cached", n=cached, seconds=0.0 if compiled else seconds)


def vllm_miss_cause(compilation_config: Any) -> str:
    """Why vLLM compiled, as far as its cache directories say: this start's key directory, and where the cache
    holds others (a restored one under another key), which part of vLLM's key differs, read from the
    ``cache_key_factors.json`` vLLM writes beside each key's artifacts."""
    cache_dir = str(getattr(compilation_config, "cache_dir", "") or "")
    if not cache_dir:
        return "vLLM's compile cache held no artifacts for this start's key"
    here = Path(cache_dir)
    try:
        others = sorted(p.name for p in here.parent.iterdir() if p.is_dir() and p.name != here.name)
    except OSError:
        others = []
    if not others:
        return f"vLLM's compile cache has no entry for key {here.name} ({here.parent})"
    ours = vllm_key_factors(here)
    for other in others[:3]:
        theirs = vllm_key_factors(here.parent / other)
        if ours is not None and theirs is not None:
            return (
                f"vLLM's compile-cache key here is {here.name}, the cache holds {other}: "
                f"{key_difference(ours, theirs)}"
            )
    return (
        f"vLLM's compile-cache key here is {here.name}, the cache holds {', '.join(others[:3])}: a part of the "
        "key differs on this host (vLLM wrote no cache_key_factors.json to say which)"
    )


# What each hash of vLLM's key covers, in the words a person fixes it by.
VLLM_KEY_PARTS = {
    "config_hash": "vLLM's config (the model's name or local path, an engine argument)",
    "code_hash": "the source files torch.compile traced (vLLM's install path or its code)",
    "compiler_hash": "torch and Inductor (their version or config)",
}


def vllm_key_factors(key_dir: Path) -> dict[str, Any] | None:
    """What a vLLM compile-cache key was made of (``rank_*/[<prefix>/]cache_key_factors.json``, written by
    vLLM 0.17+ beside the artifacts), or None where no such file is readable."""
    candidates = sorted(key_dir.glob("rank_*/cache_key_factors.json")) + sorted(
        key_dir.glob("rank_*/*/cache_key_factors.json")
    )
    for path in candidates[:4]:
        factors = fileio.read_json(path, root=key_dir)
        if factors is not None:
            return factors
    return None


def key_difference(ours: Mapping[str, Any], theirs: Mapping[str, Any]) -> str:
    """Which parts of two vLLM cache keys differ: the environment variables by name with both values, then
    each hash by what it covers."""
    env_ours, env_theirs = ours.get("env"), theirs.get("env")
    parts: list[str] = []
    if isinstance(env_ours, dict) and isinstance(env_theirs, dict):
        names = sorted(n for n in env_ours.keys() | env_theirs.keys() if env_ours.get(n) != env_theirs.get(n))
        parts += [
            f"{n} is {_shown(env_ours.get(n))} here, {_shown(env_theirs.get(n))} there" for n in names[:3]
        ]
        if len(names) > 3:
            parts.append(f"{len(names) - 3} more environment variables differ")
    parts += [
        f"{part.replace('_', ' ')} differs ({covers})"
        for part, covers in VLLM_KEY_PARTS.items()
        if ours.get(part) != theirs.get(part)
    ]
    return "; ".join(parts) or "the recorded factors are equal (the key was made another way)"


def _shown(value: Any) -> str:
    return "unset" if value is None else repr(value)[:120]
