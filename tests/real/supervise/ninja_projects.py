"""Real ninja projects of compile stand-ins for the runner tests, and tools to watch their processes.

A stand-in is a real process that behaves like a compiler where the runner can see it: it allocates a set
amount of memory and touches every page (so RSS really grows), holds it for a while, writes its output, and
records in a journal when it held the memory, so a test can count how many ran at once.
"""

from __future__ import annotations

import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil

MIB = 1024**2

STANDIN = r"""
import os, sys, time
mib, seconds, out, journal = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3], sys.argv[4]
block = bytearray(mib * 1024 * 1024)
block[::4096] = b"\x01" * len(range(0, len(block), 4096))  # touch every page (bytearray is lazy)
with open(journal, "a") as f:
    f.write(f"start {os.getpid()} {time.time()}\n")
time.sleep(seconds)
with open(journal, "a") as f:
    f.write(f"end {os.getpid()} {time.time()}\n")
with open(out, "w") as f:
    f.write("object\n")
"""

HANG = r"""
import os, sys, time
pids = sys.argv[1]
if os.fork() == 0:  # a grandchild that leaves ninja's tree (double fork) but not the session
    if os.fork() == 0:
        with open(pids, "a") as f:
            f.write(f"{os.getpid()}\n")
        time.sleep(300)
    os._exit(0)
with open(pids, "a") as f:
    f.write(f"{os.getpid()}\n")
time.sleep(300)  # hung: no output, no CPU
"""


@dataclass
class Project:
    """A ninja project directory with its build.ninja and the stand-ins' journal."""

    root: Path
    outputs: list[Path]

    @property
    def manifest(self) -> Path:
        return self.root / "build.ninja"

    @property
    def journal(self) -> Path:
        return self.root / "journal.txt"

    def max_concurrent(self) -> int:
        """The most stand-ins that held their memory at the same time (from the journal)."""
        return max_overlap([self.journal])


def max_overlap(journals: list[Path]) -> int:
    events: list[tuple[float, int]] = []
    for journal in journals:
        if not journal.exists():
            continue
        for line in journal.read_text().splitlines():
            kind, _pid, stamp = line.split()
            # At equal times count the end first: a slot is handed over, never held twice.
            events.append((float(stamp), 1 if kind == "start" else -1))
    events.sort(key=lambda e: (e[0], e[1]))
    running = peak = 0
    for _, delta in events:
        running += delta
        peak = max(peak, running)
    return peak


def write_project(
    root: Path, *, jobs: int, mib: int, seconds: float, hang: bool = False, journal: Path | None = None
) -> Project:
    root.mkdir(parents=True, exist_ok=True)
    (root / "standin.py").write_text(STANDIN)
    (root / "hang.py").write_text(HANG)
    journal = journal or root / "journal.txt"
    lines = [
        "rule compile",
        f"  command = {sys.executable} standin.py {mib} {seconds} $out {journal}",
        "rule hang",
        f"  command = {sys.executable} hang.py {root / 'hung.pids'}",
        "",
    ]
    outputs = []
    for i in range(jobs):
        (root / f"src{i}.c").write_text(f"int f{i};\n")
        lines.append(f"build obj{i}.o: compile src{i}.c")
        outputs.append(root / f"obj{i}.o")
    if hang:
        (root / "hang.c").write_text("int hung;\n")
        lines.append("build hung.o: hang hang.c")
        outputs.append(root / "hung.o")
    lines.append("build all: phony " + " ".join(p.name for p in outputs))
    lines.append("default all")
    (root / "build.ninja").write_text("\n".join(lines) + "\n")
    return Project(root, outputs)


@dataclass
class TreeSampler:
    """Samples the total RSS of the descendants of some processes, from outside the runner."""

    roots: list[int]
    include_roots: bool = False
    peak_bytes: int = 0
    seen: set[int] = field(default_factory=set)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def _once(self) -> None:
        total = 0
        for root in self.roots:
            try:
                parent = psutil.Process(root)
                procs = parent.children(recursive=True) + ([parent] if self.include_roots else [])
            except psutil.Error:
                continue
            for proc in procs:
                try:
                    total += proc.memory_info().rss
                    self.seen.add(proc.pid)
                except psutil.Error:
                    continue
        self.peak_bytes = max(self.peak_bytes, total)

    def _loop(self) -> None:
        while not self._stop.is_set():
            self._once()
            time.sleep(0.05)

    def __enter__(self) -> TreeSampler:
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread:
            self._thread.join()
