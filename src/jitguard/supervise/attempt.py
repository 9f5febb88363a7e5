"""One ninja run of a supervised build: started under its keeper, watched, and ended with nothing left behind.

``run_attempt`` starts ninja on the wrapped manifest (``process_tree``: keeper, session, cgroup), copies its
output to the log, samples the tree's memory and CPU, and ends the run on the overall deadline or when it
stalls: no output and no CPU for ``stall_timeout``, unless the build only waits for compile slots that other
builds hold. Then it says who holds them (``slots.holders_of``), in a progress message while it waits and in
the evidence when the deadline ends the wait. The runner (``supervise.runner``) plans, retries and diagnoses.
"""

from __future__ import annotations

import os
import queue
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from jitguard import fileio
from jitguard.redaction import redact_text
from jitguard.supervise import launcher, process_tree, slots
from jitguard.supervise.build_options import BuildRun
from jitguard.supervise.keeper import start_time
from jitguard.supervise.oom import OomCounters, text_evidence
from jitguard.supervise.progress import NINJA_STATUS, BuildProgress

_TICK = 0.25  # seconds between samples of the tree
_CPU_ACTIVE = 0.01  # a tree using more than 1% of one CPU is working, not hung
_TAIL_LINES = 6
_SLOT_CHECK_S = 2.0  # this long without output: see whether the build waits for other builds' slots


@dataclass
class Attempt:
    """What one ninja run did."""

    jobs: int
    returncode: int | None = None
    ended: str = "done"  # done | timeout | stalled | interrupted
    text: list[str] = field(default_factory=list)
    peak_rss: int = 0
    peak_job_rss: int = 0
    oom_evidence: list[str] = field(default_factory=list)
    still_running: list[str] = field(default_factory=list)  # commands running when a watchdog ended it
    slot_holders: list[str] = field(
        default_factory=list
    )  # other builds' processes that hold the slots it waits for


def build_env(b: BuildRun, jobs: int, attempt_no: int = 1) -> dict[str, str]:
    """ninja's environment: the launcher's slots and grace period, who this build is (for ``slots``), and
    the attempt's sccache server when the build uses the compiler cache."""
    env = _launcher_env(dict(os.environ, NINJA_STATUS=NINJA_STATUS))
    env[launcher.SLOTS_DIR_ENV] = str(b.slots_dir)
    env[launcher.SLOT_COUNT_ENV] = str(jobs)
    env[launcher.GRACE_ENV] = f"{b.options.kill_grace:g}"
    env[slots.OWNER_ENV] = f"{os.getpid()}:{start_time(os.getpid())}"
    env[slots.MODULE_ENV] = b.module
    if b.compiler_cache is not None:
        env.update(b.compiler_cache.attempt_env(attempt_no))
    return env


def _launcher_env(env: dict[str, str]) -> dict[str, str]:
    """``env`` where ``python -m jitguard.supervise.launcher`` can import jitguard.

    An installed jitguard (site-packages, or an editable install's .pth) is found by the launcher's interpreter
    anyway. A source tree that only this process has on ``sys.path`` (``PYTHONPATH=src`` set in code, a
    benchmark or test harness) is appended to PYTHONPATH so the compile commands do not fail to start.
    """
    root = str(Path(__file__).resolve().parents[2])  # what holds jitguard/: src/ or site-packages
    if Path(root).name in ("site-packages", "dist-packages"):
        return env
    current = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    if root not in current:
        env["PYTHONPATH"] = os.pathsep.join([*current, root])
    return env


def _pump(stream: IO[bytes], log: fileio.LogFile, lines: queue.Queue[str | None]) -> None:
    """Copy ninja's output to the log, line by line, and hand each line (redacted) to the supervisor. A log
    that cannot take more (a full disk) never stops the copy: ninja must not block on a full pipe."""
    try:
        for raw in iter(stream.readline, b""):
            log.write(raw)
            lines.put(redact_text(raw.decode("utf-8", "replace").rstrip("\n")))
    except (OSError, ValueError):
        pass
    finally:
        lines.put(None)


def run_attempt(
    b: BuildRun,
    *,
    wrapped: Path,
    jobs: int,
    attempt_no: int,
    deadline: float,
    counters: OomCounters,
) -> Attempt:
    argv = [b.ninja, "-C", str(b.build_dir), "-f", str(wrapped.resolve()), "-j", str(jobs)]
    note(b.log, f"attempt {attempt_no}: {' '.join(argv)}")
    attempt = Attempt(jobs=jobs)
    progress = BuildProgress(module=b.module, jobs=jobs, attempt=attempt_no, learned=b.learned)
    tree = process_tree.ProcessTree.start(
        argv, env=build_env(b, jobs, attempt_no), keep_fds=b.keep_fds, grace=b.options.kill_grace
    )
    assert tree.popen.stdout is not None
    lines: queue.Queue[str | None] = queue.Queue()
    pump = threading.Thread(target=_pump, args=(tree.popen.stdout, b.log, lines), daemon=True)
    pump.start()
    last_activity = time.monotonic()
    last_cpu: float | None = None
    last_sample = 0.0
    watched: set[int] = set()
    output_done = False
    next_slot_check = next_slot_report = 0.0
    try:
        while True:
            # Drain output; a line is activity, a [k/n] line is progress.
            try:
                line = lines.get(timeout=_TICK)
                while True:
                    if line is None:
                        output_done = True
                    else:
                        attempt.text.append(line)
                        progress.feed(line)
                        progress.waiting_for_slot = False
                        last_activity = time.monotonic()
                    line = lines.get_nowait()
            except queue.Empty:
                pass
            now = time.monotonic()
            if now - last_sample >= _TICK:
                last_sample = now
                sample = tree.sample()
                progress.rss_bytes = sample.rss_bytes
                progress.peak_rss_bytes = max(progress.peak_rss_bytes, sample.rss_bytes)
                attempt.peak_rss = progress.peak_rss_bytes
                if sample.job_rss:
                    attempt.peak_job_rss = max(attempt.peak_job_rss, max(sample.job_rss.values()))
                new = sample.pids - watched
                if new:
                    counters.watch(new)
                    watched |= new
                if last_cpu is not None and sample.cpu_seconds - last_cpu >= _CPU_ACTIVE * _TICK:
                    last_activity = now
                last_cpu = sample.cpu_seconds
            returncode = tree.poll()
            if returncode is not None and (output_done or not pump.is_alive()):
                attempt.returncode = returncode
                break
            if now >= deadline:
                attempt.ended = "timeout"
                break
            idle = now - last_activity
            stall = b.options.stall_timeout
            if idle >= min(_SLOT_CHECK_S, stall) and (now >= next_slot_check or idle >= stall):
                # Waiting for slots that other builds hold is not a stall; the deadline still bounds it.
                next_slot_check = now + _SLOT_CHECK_S
                was_waiting = progress.waiting_for_slot
                attempt.slot_holders = _foreign_slot_holders(tree, b.slots_dir)
                progress.waiting_for_slot = bool(attempt.slot_holders)
                if attempt.slot_holders or was_waiting:
                    # Waiting, or the wait just ended: the stall clock starts when the build can run.
                    last_activity = now
                if attempt.slot_holders and now >= next_slot_report:
                    next_slot_report = now + b.options.progress_interval
                    text = "; ".join(attempt.slot_holders)
                    note(b.log, f"waiting for a compile slot; other builds hold them: {text}")
                    b.reporter.message(f"jitguard: {b.module} waits for a compile slot held by {text}")
            if now - last_activity >= b.options.stall_timeout:
                if _waits_for_cpu(tree):
                    last_activity = now  # starved by a busy host, not hung: runnable processes are working
                else:
                    attempt.ended = "stalled"
                    break
            b.reporter.update(progress)
        if attempt.ended != "done":
            # ninja names a command only when it finishes: say in the log what was running when we stopped.
            attempt.still_running = _running_commands(tree)
            # A busy host can reach the deadline before the first slot check: look once more before saying why.
            attempt.slot_holders = _foreign_slot_holders(tree, b.slots_dir)
            progress.waiting_for_slot = bool(attempt.slot_holders)
            if progress.waiting_for_slot and next_slot_report == 0.0:
                text = "; ".join(attempt.slot_holders)
                note(b.log, f"waiting for a compile slot; other builds hold them: {text}")
            if progress.waiting_for_slot:
                attempt.still_running += [f"waiting for a compile slot: {h}" for h in attempt.slot_holders]
            for command in attempt.still_running:
                note(b.log, f"still running when stopped ({attempt.ended}): {command}")
    except KeyboardInterrupt:
        tree.kill()
        note(b.log, "interrupted (KeyboardInterrupt): every process of the build was stopped")
        raise KeyboardInterrupt(f"build of {b.module} interrupted; full log: {b.log.name}") from None
    finally:
        if attempt.ended != "done":
            tree.kill()
        else:
            tree.finish()
        pump.join(timeout=5)
        # Lines that arrived after the last drain.
        while True:
            try:
                line = lines.get_nowait()
            except queue.Empty:
                break
            if line is not None:
                attempt.text.append(line)
                progress.feed(line)
        b.reporter.update(progress)
    if attempt.ended == "done" and attempt.returncode != 0:
        attempt.oom_evidence = _oom_evidence(attempt, counters)
    return attempt


def _running_commands(tree: process_tree.ProcessTree) -> list[str]:
    """The command lines of the build's jobs now (launchers that already run their command are skipped)."""
    commands = []
    for proc in tree.members(include_session=False):
        if proc.pid in (tree.pid, tree.command_pid):
            continue
        try:
            cmdline = proc.cmdline()
            if "jitguard.supervise.launcher" in " ".join(cmdline) and proc.children():
                continue
        except Exception:
            continue
        commands.append(f"pid {proc.pid}: {' '.join(cmdline)[:300]}")
    return commands[:_TAIL_LINES]


def _waits_for_cpu(tree: process_tree.ProcessTree) -> bool:
    """Whether a process of the build is runnable (state R): it used no CPU because the host gave it none,
    which a hung compiler (asleep on something that never comes) is not."""
    import psutil

    for proc in tree.members(include_session=False):
        try:
            if proc.status() == psutil.STATUS_RUNNING:
                return True
        except psutil.Error:
            continue
    return False


def _foreign_slot_holders(tree: process_tree.ProcessTree, slots_dir: Path) -> list[str]:
    """When a launcher of this build waits for a slot: the processes outside the build that hold slots."""
    members = tree.members(include_session=False)
    pids = {p.pid for p in members}
    waiting = False
    for proc in members:
        try:
            if "jitguard.supervise.launcher" in " ".join(proc.cmdline()) and not proc.children():
                waiting = True
                break
        except Exception:
            continue
    locked = {index: pid for index, pid in slots.holders(slots_dir).items() if pid not in pids}
    if not waiting or not locked:
        return []
    found = [h.describe() for h in slots.holders_of(slots_dir) if h.pid not in pids]
    # A holder whose files this process cannot read (another user, another pid namespace) is still named.
    return found or [f"slot {index}: pid {pid} (see /proc/locks)" for index, pid in sorted(locked.items())]


def _oom_evidence(attempt: Attempt, counters: OomCounters) -> list[str]:
    evidence = text_evidence("\n".join(attempt.text))
    evidence += counters.kills()
    if attempt.returncode in (-9, 137):
        evidence.append(f"ninja itself was killed by SIGKILL (exit status {attempt.returncode})")
    if evidence:
        host = counters.host_kills()
        if host:
            evidence.append(host)
    return evidence


def note(log: fileio.LogFile, text: str) -> None:
    """A line of jitguard's own in the build log (prefixed, so it is told apart from ninja's output)."""
    log.write(f"jitguard: {text}\n".encode())
    log.flush()
