"""One engine start watched from outside, for ``benchmarks/vllm_engine.py`` and ``tests/gpu/vllm``.

The command runs in a session of its own under a time limit; its log is read as it comes, with the stage of
an engine start each line shows it reached (``STAGES``: vLLM's own log lines, and the ``BENCH`` lines of
``vllm_engine_start.py``); afterwards every process it left is killed by process id: its session, everything
below it, and the sessions those processes started (jitguard's build keeper leads one of its own, and ninja
puts each compile in a process group of its own), found from /proc while the engine ran. When it runs past
its limit, ``EngineRun.hang`` says in which stage, for how long, and what FlashInfer's build said last.

    from engine_session import run      # beside this file; tests load it by path
    done = run([sys.executable, "vllm_engine_start.py", "serve", ...], env, limit_s=300)
    if done.timed_out: raise AssertionError(done.hang())
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path

MIN_ROW_S = 60.0  # an engine start with less than this left of its run's budget is not begun


class Budget:
    """A run's seconds (one device call) shared by its engine starts: each gets at most what is left."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.started = time.monotonic()

    def left(self) -> float:
        return self.seconds - (time.monotonic() - self.started)


# The stages of one engine start, in order, each with the first log line that shows it began.
STAGES: tuple[tuple[str, re.Pattern[str] | None], ...] = (
    ("importing vLLM and building its config", None),
    ("starting the engine core", re.compile(r"Initializing a V1 LLM engine")),
    ("loading the model", re.compile(r"Starting to load model")),
    (
        "the profile run (first forward and sampling: GDN prefill, the sampler, Triton's first compiles)",
        re.compile(r"Model loading took"),
    ),
    ("allocating the KV cache and warming up", re.compile(r"Available KV cache memory|GPU KV cache size")),
    ("the first request (1 token)", re.compile(r"^BENCH READY")),
    ("generating 8 tokens", re.compile(r"^BENCH TTFT")),
    ("done", re.compile(r"^BENCH GENERATED")),
)
# What a FlashInfer JIT build says (stock FlashInfer, and jitguard's supervised build), for a hang's report.
BUILD_LINE = re.compile(
    r"JIT-compiled|jitguard: build|Build of |ninja|\[\d+/\d+\]|nvcc|cannot find -l|FlashInfer.*(compil|build)",
    re.IGNORECASE,
)
COMPILERS = ("cicc", "ptxas", "nvcc", "cudafe++", "cc1plus", "ld")


@dataclass
class EngineRun:
    """What one engine start did. Times in seconds from its start."""

    limit_s: float
    status: int | None = None  # exit status; None when it was killed at the limit
    elapsed_s: float = 0.0
    stage: str = STAGES[0][0]
    stage_s: float = 0.0  # when it entered ``stage``
    ready_s: float | None = None
    ttft_s: float | None = None
    generated: int | None = None
    peak_compilers: int = 0  # the most compiler processes of this engine alive at once
    last_build_line: str | None = None
    lines: list[tuple[float, str]] = field(default_factory=list, repr=False)
    killed: list[int] = field(default_factory=list)  # pids still alive at the end, killed then

    @property
    def timed_out(self) -> bool:
        return self.status is None

    @property
    def output(self) -> str:
        return "\n".join(line for _, line in self.lines)

    def tail(self, count: int = 40) -> str:
        return "\n".join(f"[{t:6.1f} s] {line}" for t, line in self.lines[-count:])

    def hang(self) -> str:
        """One paragraph: where the engine was when its limit ran out, and its last lines."""
        where = (
            f"the engine did not finish within {self.limit_s:g} s: it hung in {self.stage} (from "
            f"{self.stage_s:.1f} s on, {self.elapsed_s - self.stage_s:.0f} s there)"
        )
        if self.peak_compilers:
            where += f"; up to {self.peak_compilers} compiler processes ran at once (a JIT build)"
        if self.last_build_line:
            where += f"; the build's last line: {self.last_build_line[:300]}"
        return f"{where}. Its last lines:\n{self.tail()}"

    def summary(self) -> str:
        """One line for any outcome (a failure message's first line)."""
        if self.timed_out:
            return self.hang().split(". Its last lines:")[0]
        return f"exit {self.status} after {self.elapsed_s:.1f} s, last in {self.stage}"


Stages = Sequence[tuple[str, "re.Pattern[str] | None"]]


def host_caches(host: Path) -> dict[str, str]:
    """The variables that put every cache an engine start fills, whatever the engine, under one "host"
    directory (HOME and XDG too: tools that know no variable of their own write there), and keep the start
    offline and its output unbuffered. Each benchmark adds its engine's own (VLLM_CACHE_ROOT, SGLANG_CACHE_DIR)."""
    return {
        "PYTHONUNBUFFERED": "1",
        "HF_HUB_OFFLINE": "1",
        "HOME": str(host / "home"),
        "XDG_CACHE_HOME": str(host / "xdg"),
        "TRITON_CACHE_DIR": str(host / "triton"),
        "TORCHINDUCTOR_CACHE_DIR": str(host / "inductor"),
        "FLASHINFER_WORKSPACE_BASE": str(host / "flashinfer"),
        "JITGUARD_CACHE_DIR": str(host / "jitguard"),
        "CUTE_DSL_CACHE_DIR": str(host / "cute-dsl"),
    }


def run(
    argv: Sequence[str],
    env: Mapping[str, str],
    *,
    limit_s: float,
    on_line: Callable[[float, str], None] | None = None,
    stages: Stages = STAGES,
    poll_s: float = 1.0,
) -> EngineRun:
    """Start ``argv`` in a session of its own, read its output until it exits or ``limit_s`` passes, then kill
    every process it left by id. ``on_line(seconds, line)`` sees each line as it comes; ``stages`` (default:
    an engine start's) name what the command is doing, for ``EngineRun.hang``."""
    done = EngineRun(limit_s, stage=stages[0][0])
    started = time.monotonic()
    proc = subprocess.Popen(
        list(argv),
        env=dict(env),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        text=True,
        errors="replace",
        start_new_session=True,
    )
    reader = threading.Thread(target=_read, args=(proc, done, started, on_line, stages), daemon=True)
    reader.start()
    sessions = {proc.pid}  # the engine's session (its id is the leader's pid) and any session it starts
    try:
        while proc.poll() is None and time.monotonic() - started < limit_s:
            members = _members(sessions, _table())
            done.peak_compilers = max(done.peak_compilers, _compilers(members))
            time.sleep(poll_s)
    finally:
        status = proc.poll()
        done.killed = kill(sessions)  # by pid: also what it left when it exited by itself
        with suppress(subprocess.TimeoutExpired):
            proc.wait(10)
        reader.join(10)
        done.elapsed_s = round(time.monotonic() - started, 1)
        done.status = status
    return done


def _read(
    proc: subprocess.Popen[str],
    done: EngineRun,
    started: float,
    on_line: Callable[[float, str], None] | None,
    stages: Stages,
) -> None:
    assert proc.stdout is not None
    reached = 0
    for raw in proc.stdout:
        line = raw.rstrip()
        now = round(time.monotonic() - started, 1)
        done.lines.append((now, line))
        for index in range(reached + 1, len(stages)):
            pattern = stages[index][1]
            if pattern is not None and pattern.search(line):
                reached = index
                done.stage, done.stage_s = stages[index][0], now
        if line.startswith("BENCH READY"):
            done.ready_s = now
        elif line.startswith("BENCH TTFT"):
            with suppress(ValueError):
                done.ttft_s = round(float(line.split()[-1]), 3)
        elif line.startswith("BENCH GENERATED"):
            with suppress(ValueError):
                done.generated = int(line.split()[-1])
        if BUILD_LINE.search(line):
            done.last_build_line = line
        if on_line is not None:
            on_line(now, line)


# ---- the processes of a session, from /proc -------------------------------------------------------------
@dataclass(frozen=True)
class _Proc:
    pid: int
    ppid: int
    sid: int
    comm: str


def _table() -> dict[int, _Proc]:
    """Every process now: pid -> (parent, session, command name)."""
    found: dict[int, _Proc] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        comm = stat[stat.find("(") + 1 : stat.rfind(")")]
        fields = stat[stat.rfind(")") + 2 :].split()
        # after "pid (comm)": state ppid pgrp session ...; a zombie is gone already (it only waits for its
        # parent to read its status)
        if fields[0] != "Z":
            found[int(entry.name)] = _Proc(int(entry.name), int(fields[1]), int(fields[3]), comm)
    return found


def _members(sessions: set[int], table: Mapping[int, _Proc]) -> list[_Proc]:
    """The processes of ``sessions`` and everything below them; a session one of them leads joins
    ``sessions`` (so it is still found once its leader is gone)."""
    chosen: dict[int, _Proc] = {}
    changed = True
    while changed:
        changed = False
        for proc in table.values():
            if proc.pid in chosen:
                continue
            if proc.sid in sessions or proc.ppid in chosen:
                chosen[proc.pid] = proc
                changed = True
                if proc.sid not in sessions and proc.sid == proc.pid:
                    sessions.add(proc.sid)
    return list(chosen.values())


def _compilers(members: Iterable[_Proc]) -> int:
    return sum(1 for p in members if p.comm in COMPILERS)


def kill(sessions: set[int], rounds: int = 10) -> list[int]:
    """SIGKILL every process of ``sessions`` (and below them) by pid, until none is left; the pids killed."""
    killed: list[int] = []
    me = os.getpid()
    for _ in range(rounds):
        targets = [p.pid for p in _members(sessions, _table()) if p.pid != me]
        if not targets:
            break
        for pid in targets:
            with suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
                if pid not in killed:
                    killed.append(pid)
        time.sleep(0.3)
    return killed
