"""One engine process's ledger from begin to ready: what the engine integrations call.

``begin`` when the plugin registers (the tools' counters are read then, so only this start's work counts);
``covered_by`` once the warm snapshot is restored or found; ``ready`` where the engine says it is ready (vLLM:
``EngineCore._initialize_kv_caches`` and each worker's ``compile_or_warm_up_model`` returned), which reads the
counters, logs the one line and writes this process's file. A compile after ready (a first request's JIT)
rewrites the file at once; so does the process's exit where something changed since.
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from jitguard.boundary import process_facts
from jitguard.config import default_cache_dir, read
from jitguard.facts.jit_caches import LAYER_NAMES, layer
from jitguard.ledger import history, record, tally, tools

log = logging.getLogger("jitguard.ledger")


@dataclass
class _Baseline:
    inductor: dict[str, float] | None = None
    vllm: dict[str, float] | None = None
    inductor_cache: str = ""
    compilation_config: Any = None
    ready: bool = False
    written: list[Path] = field(default_factory=list)
    cache_dir: Path | None = None  # where this start's ledger is kept: the engine entry's cache dir


_baseline = _Baseline()
_lock = threading.Lock()
_hooks_registered = False


def begin(engine: str, *, import_s: float = 0.0, cache_dir: Path | None = None) -> tally.Tally:
    """This process's ledger (idempotent): made, counters read as they are now, jitguard's import counted;
    written under ``cache_dir`` (default: ``JITGUARD_CACHE_DIR``'s). A process forked from here carries the
    start on (``_continue_in_child``): vLLM forks its engine core by default, and a forked child loads no
    plugin again."""
    global _hooks_registered
    with _lock:
        fresh = tally.current() is None
        current = tally.begin(engine)
        if cache_dir is not None:
            _baseline.cache_dir = cache_dir
        if fresh:
            _baseline.inductor = tools.inductor_readings()
            _baseline.vllm = tools.vllm_readings()
            current.phase("import", import_s)
        if not _hooks_registered:
            atexit.register(_at_exit)
            os.register_at_fork(after_in_child=_continue_in_child, after_in_parent=tally.handed_to_child)
            _hooks_registered = True
    return current


def _continue_in_child() -> None:
    """After a fork, in the child: its own ledger of the same start, counters read now."""
    global _baseline, _lock
    _lock = threading.Lock()  # another thread may have held it at the fork
    try:
        if tally.continue_in_child() is not None:
            _baseline = _Baseline(
                inductor=tools.inductor_readings(),
                vllm=tools.vllm_readings(),
                inductor_cache=_baseline.inductor_cache,
                cache_dir=_baseline.cache_dir,
            )
    except Exception as exc:  # the ledger never costs the engine anything
        log.debug("jitguard: the forked process's start ledger was not begun: %s", exc)


def covered_by(
    outcome: str, name: str, mode: str, cache_layers: Iterable[str], engine: str, cache_dir: Path
) -> record.Warm:
    """Tell the ledger which warm snapshot covers this start (``cache_layers``: its cache layers) and so which
    ledger layers must hit; returns what was recorded."""
    roots = {
        n: os.path.abspath(os.path.expanduser(layer(n, os.environ, cache_dir).root)) for n in LAYER_NAMES
    }
    restored = tuple(cache_layers) if outcome in ("restored", "partial", "present") else ()
    warm = record.Warm(mode, outcome, name, record.covered_layers(restored, roots, engine))
    current = tally.current()
    if current is not None:
        current.set_warm(warm)
    _baseline.inductor_cache = roots.get("inductor", "")
    if mode == "require" and not warm.covered:
        log.error(
            "jitguard: JITGUARD_WARM=require, but no warm snapshot covers this start (%s): every compile is a "
            "cold one; restore one first (`jitguard warm restore --store URL`) or set JITGUARD_SHARE",
            outcome,
        )
    return warm


def ready(
    role: str, *, compilation_config: Any = None, cache_dir: Path | None = None
) -> record.ProcessRecord | None:
    """The engine is ready in this process: count what the tools' counters say since ``begin``, log the
    ledger's line and write this process's file. None outside an engine start."""
    current = tally.current()
    if current is None:
        return None
    with _lock:
        _count_counters(compilation_config)
        if compilation_config is not None:
            _baseline.compilation_config = compilation_config
        _facts_phase(current)
        again = _baseline.ready  # one GPU: vLLM's worker and engine core are one process, ready twice
        done = current.mark_ready(role)
        _baseline.ready = True
    if not again:
        log.info("jitguard: %s", record.summary_line(done))
    _write(current, cache_dir)
    current.on_change = lambda: _write(current, cache_dir)
    return done


def _count_counters(compilation_config: Any) -> None:
    """What Inductor and vLLM counted since the last reading, into the tally; the readings move on."""
    tools.count_inductor(_baseline.inductor, _baseline.inductor_cache or "its cache dir")
    _baseline.inductor = tools.inductor_readings()
    tools.count_vllm(_baseline.vllm, compilation_config or _baseline.compilation_config)
    _baseline.vllm = tools.vllm_readings()


def _facts_phase(current: tally.Tally) -> None:
    provider = process_facts.process_facts()
    seconds = provider.seconds
    if seconds and "facts" not in current.record.phases:
        current.phase("facts", seconds)
        slowest = sorted(provider.probe_seconds().items(), key=lambda item: -item[1])[:4]
        if slowest:
            said = ", ".join(f"{name} {took:.2f} s" for name, took in slowest)
            current.note(f"facts: the slowest probes: {said}", about="facts:")


def _write(current: tally.Tally, cache_dir: Path | None) -> None:
    try:
        keep = read("JITGUARD_STARTS_KEEP") or history.DEFAULT_KEEP
        current.dirty = False
        path = history.write(
            current.record, cache_dir or _baseline.cache_dir or default_cache_dir(), keep=keep
        )
    except Exception as exc:  # the ledger never costs the engine anything
        log.debug("jitguard: the start ledger was not written: %s", exc)
        return
    if path not in _baseline.written:
        _baseline.written.append(path)
        log.debug("jitguard: start ledger in %s", path)


def _at_exit() -> None:
    current = tally.current()
    if current is None:
        return
    if _baseline.ready:
        _count_counters(None)  # what compiled after ready (a first request), counted as after-ready
    if current.dirty and (_baseline.ready or any(c.active for c in current.record.layers.values())):
        _write(current, None)


def forget() -> None:
    """No ledger in this process any more (tests)."""
    global _baseline
    tally.forget()
    _baseline = _Baseline()
