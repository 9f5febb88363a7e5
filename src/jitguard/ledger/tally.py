"""This process's start ledger as it fills: events per JIT layer, jitguard's phases, the warm snapshot that
covered the start, and the must-hit errors of ``JITGUARD_WARM=require``.

Every part of jitguard that compiles, loads or waits counts here (``count``, ``phase``); outside an engine
start (``begin`` not called: the CLI, a test) counting is a no-op. The start id joins the processes of one
engine start: the first process that begins makes one and puts it in ``JITGUARD_START_ID``, so the processes
it starts afterwards (vLLM's EngineCore and workers, SGLang's schedulers) inherit it and record under it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import secrets
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import replace

from jitguard.ledger.record import (
    LAYERS,
    MAX_EXAMPLES,
    MAX_MISSES,
    PHASES,
    LayerCounts,
    Miss,
    ProcessRecord,
    Warm,
)

Cause = str | Callable[[], str]  # why a compile happened, or how to find out (called for a miss only)
log = logging.getLogger("jitguard.ledger")
START_ID = "JITGUARD_START_ID"
MAX_LOGGED = 10  # must-hit errors in the log per process; the ledger keeps more
_VALID_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,79}", re.ASCII)


def start_id_from_env() -> str:
    """The start id this process records under: ``JITGUARD_START_ID`` when a parent set it, else a new one
    (UTC time first, so ids sort by start), set in ``os.environ`` for the processes started from here."""
    given = os.environ.get(START_ID, "")
    if _VALID_ID.fullmatch(given):
        return given
    new = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()) + f"-{os.getpid()}-{secrets.token_hex(3)}"
    os.environ[START_ID] = new
    return new


class Tally:
    """The record of one process, thread-safe (Triton compiles from several threads)."""

    def __init__(self, start_id: str, engine: str, role: str = "process") -> None:
        self._lock = threading.Lock()
        self._record = ProcessRecord(start_id, os.getpid(), engine, role, time.time())
        self.dirty = False
        self.on_change: Callable[[], None] | None = None  # after ready: write the record again

    @property
    def record(self) -> ProcessRecord:
        with self._lock:
            return self._record

    def count(
        self, layer: str, outcome: str, *, n: int = 1, seconds: float = 0.0, what: str = "", cause: Cause = ""
    ) -> None:
        """``n`` events of ``outcome`` (compiled, cached, restored) in ``layer``; a compile in a layer the warm
        snapshot covers is a must-hit miss (an error under ``JITGUARD_WARM=require``). ``cause``: why it
        compiled, or how to find out (called only for a miss)."""
        if layer not in LAYERS or n <= 0:
            return
        seen = self._record  # the cause may read files: worked out before the lock, for a miss only
        might_miss = outcome == "compiled" and layer in seen.warm.covered and len(seen.misses) < MAX_MISSES
        why = (cause() if callable(cause) else cause) if might_miss else ""
        with self._lock:
            record = self._record
            old = record.layers.get(layer, LayerCounts())
            after_ready = n if outcome == "compiled" and record.ready_at is not None else 0
            examples = old.examples
            if outcome == "compiled" and what and what not in examples and len(examples) < MAX_EXAMPLES:
                examples = (*examples, what)
            new = replace(
                old,
                compiled=old.compiled + (n if outcome == "compiled" else 0),
                cached=old.cached + (n if outcome == "cached" else 0),
                restored=old.restored + (n if outcome == "restored" else 0),
                seconds=old.seconds + max(0.0, seconds),
                after_ready=old.after_ready + after_ready,
                examples=examples,
            )
            misses = record.misses
            miss = outcome == "compiled" and layer in record.warm.covered
            if miss and len(misses) < MAX_MISSES:
                misses = (
                    *misses,
                    Miss(layer, what or f"{n} {LAYERS[layer].title}", why or "the tool did not say"),
                )
            self._record = replace(record, layers={**record.layers, layer: new}, misses=misses)
            self.dirty = True
            mode = record.warm.mode
        if after_ready and self.on_change is not None:
            self.on_change()
        if miss and mode == "require" and len(misses) <= MAX_LOGGED:
            log.error(
                "jitguard: must-hit miss: %s compiled %s although the warm snapshot %r covers it: %s "
                "(`jitguard starts` shows this start)",
                LAYERS[layer].title,
                what or f"{n} item(s)",
                record.warm.name,
                why or "the tool did not say why",
            )
            if len(misses) == MAX_LOGGED:
                log.error(
                    "jitguard: further must-hit misses are not logged; `jitguard starts --check` lists them"
                )

    def phase(self, name: str, seconds: float) -> None:
        """``seconds`` more of jitguard's own phase ``name``."""
        if name not in PHASES or seconds <= 0:
            return
        with self._lock:
            phases = dict(self._record.phases)
            phases[name] = phases.get(name, 0.0) + seconds
            self._record = replace(self._record, phases=phases)
            self.dirty = True

    def set_warm(self, warm: Warm) -> None:
        with self._lock:
            self._record = replace(self._record, warm=warm)
            self.dirty = True

    def note(self, text: str, *, about: str = "") -> None:
        """A note for the record; one per ``about`` (a later one replaces an earlier one on the same topic)."""
        with self._lock:
            kept = tuple(n for n in self._record.notes if n != text and not (about and n.startswith(about)))
            self._record = replace(self._record, notes=(*kept, text))

    def mark_ready(self, role: str) -> ProcessRecord:
        with self._lock:
            self._record = replace(self._record, role=role, ready_at=time.time())
            self.dirty = True
            return self._record


_current: Tally | None = None
_lock = threading.Lock()


def begin(engine: str) -> Tally:
    """This process's tally, made on the first call (idempotent)."""
    global _current
    with _lock:
        if _current is None or _current.record.pid != os.getpid():  # a forked child starts its own
            _current = Tally(start_id_from_env(), engine)
        return _current


def continue_in_child() -> Tally | None:
    """In a forked child (vLLM's engine core under its default fork method): this process's tally, carrying on
    the parent's start (its id, engine, start time, jitguard's phases so far, warm snapshot and notes; none of
    its counts, which were the parent's), or None where the parent had none."""
    global _current, _lock
    _lock = threading.Lock()  # another thread may have held it at the fork
    parent = _current
    if parent is None or parent._record.pid == os.getpid():
        return None
    old = parent._record  # not through its lock: another thread may have held that at the fork
    child = Tally(old.start_id, old.engine)
    child._record = replace(
        child._record, started_at=old.started_at, phases=dict(old.phases), warm=old.warm, notes=old.notes
    )
    _current = child
    return child


def handed_to_child() -> None:
    """In the parent after a fork: its phases so far went to the child's record (counted once, there)."""
    tally = current()
    if tally is not None:
        with tally._lock:
            tally._record = replace(tally._record, phases={})


def current() -> Tally | None:
    """This process's tally, or None outside an engine start."""
    tally = _current
    return tally if tally is not None and tally.record.pid == os.getpid() else None


def forget() -> None:
    """No tally in this process any more (tests)."""
    global _current
    with _lock:
        _current = None


def count(
    layer: str, outcome: str, *, n: int = 1, seconds: float = 0.0, what: str = "", cause: Cause = ""
) -> None:
    """``Tally.count`` on this process's tally; nothing outside an engine start."""
    tally = current()
    if tally is not None:
        tally.count(layer, outcome, n=n, seconds=seconds, what=what, cause=cause)


def phase(name: str, seconds: float) -> None:
    tally = current()
    if tally is not None:
        tally.phase(name, seconds)


@contextlib.contextmanager
def timed(name: str) -> Iterator[None]:
    """Count the block's wall time to jitguard's phase ``name``."""
    started = time.perf_counter()
    try:
        yield
    finally:
        phase(name, time.perf_counter() - started)
