"""Watching the real processes a test starts: is one still running, wait for something, never leave strays."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

import psutil


def running(pid: int) -> bool:
    """True when ``pid`` is a live process (a zombie waiting for its reaper counts as gone)."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def survivors(pids: Iterable[int], timeout: float = 15.0) -> list[int]:
    """The pids still running after up to ``timeout`` s (stopping a tree takes a grace period)."""
    pids = list(pids)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and any(running(p) for p in pids):
        time.sleep(0.05)
    return [p for p in pids if running(p)]


def wait_for(condition: Callable[[], object], what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")


def read_pids(path: Path, count: int, timeout: float = 60.0) -> list[int]:
    """The first ``count`` pids a test process wrote to ``path`` (waits until they are there)."""
    wait_for(
        lambda: path.exists() and len(path.read_text().split()) >= count, f"{count} pids in {path}", timeout
    )
    return [int(x) for x in path.read_text().split()]


@contextlib.contextmanager
def reaping(pids: list[int]) -> Iterator[list[int]]:
    """Stray test processes never outlive a failed test: SIGKILL every pid in the (growing) list at the end."""
    try:
        yield pids
    finally:
        for pid in pids:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
