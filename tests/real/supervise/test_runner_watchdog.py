"""A hung or abandoned build leaves nothing behind: stall watchdog, timeout, and the runner's own death."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest
from ninja_projects import TreeSampler, write_project

from jitguard.errors import BuildFailed
from jitguard.supervise import slots
from jitguard.supervise.runner import BuildOptions, run_ninja
from live_processes import reaping as killing
from live_processes import running


def _hung_pids(project_root: Path, count: int = 2, wait: float = 30.0) -> list[int]:
    """The pids the hung job and its detached grandchild wrote (waits until both are there)."""
    path = project_root / "hung.pids"
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        if path.exists():
            pids = [int(x) for x in path.read_text().split()]
            if len(pids) >= count:
                return pids
        time.sleep(0.05)
    raise AssertionError(f"the hung job did not start ({path})")


def test_stall_watchdog_ends_a_hung_build_and_no_process_of_it_survives(
    tmp_path: Path, cache_dir: Path
) -> None:
    project = write_project(tmp_path / "p", jobs=1, mib=10, seconds=0.1, hang=True)
    # A generous overall timeout: only the stall watchdog can end this build as "stalled".
    options = BuildOptions(jobs=2, timeout=120, stall_timeout=2, progress="none", cache_dir=cache_dir)

    with TreeSampler([os.getpid()]) as sampler, pytest.raises(BuildFailed) as failed:
        run_ninja(project.root, project.manifest, module="hangs", options=options)

    assert [f.code for f in failed.value.findings] == ["build-stalled"]
    log_path = failed.value.log_path
    assert log_path and Path(log_path).exists() and log_path in str(failed.value)
    assert "hang.py" in Path(log_path).read_text()  # the log names the command that hung
    hung = _hung_pids(project.root)
    assert sampler.seen  # the sampler really saw the build's processes
    survivors = [pid for pid in {*hung, *sampler.seen} if running(pid)]
    assert survivors == [], [psutil.Process(p).cmdline() for p in survivors if running(p)]


def test_overall_timeout_ends_the_build_with_the_timeout_finding(tmp_path: Path, cache_dir: Path) -> None:
    project = write_project(tmp_path / "p", jobs=0, mib=10, seconds=0.1, hang=True)
    options = BuildOptions(jobs=1, timeout=2, stall_timeout=600, progress="none", cache_dir=cache_dir)

    with pytest.raises(BuildFailed) as failed:
        run_ninja(project.root, project.manifest, module="slow", options=options)

    assert [f.code for f in failed.value.findings] == ["build-timeout"]
    assert all(not running(pid) for pid in _hung_pids(project.root))


@pytest.mark.parametrize("how", [signal.SIGTERM, signal.SIGKILL], ids=["sigterm", "sigkill"])
def test_runner_process_ending_takes_the_whole_build_with_it(
    tmp_path: Path, cache_dir: Path, how: signal.Signals
) -> None:
    project = write_project(tmp_path / "p", jobs=1, mib=10, seconds=60, hang=True)
    command = [sys.executable, "-m", "jitguard.cli", "build", "ninja", str(project.manifest), "--jobs", "2"]
    runner = subprocess.Popen(
        [*command, "--progress", "none"], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    with killing([runner.pid]), TreeSampler([runner.pid]) as sampler:
        hung = _hung_pids(project.root)
        time.sleep(0.5)  # let the sampler see the whole tree
        runner.send_signal(how)
        runner.communicate(timeout=30)
        deadline = (
            time.monotonic() + 10
        )  # SIGKILL: the kernel's PDEATHSIG and ninja's own cleanup take a moment
        while time.monotonic() < deadline and any(running(p) for p in {*hung, *sampler.seen} - {runner.pid}):
            time.sleep(0.1)

    assert runner.returncode == -how
    survivors = [pid for pid in {*hung, *sampler.seen} if pid != runner.pid and running(pid)]
    assert survivors == []


def test_waiting_for_a_slot_another_build_holds_is_not_a_stall(tmp_path: Path, cache_dir: Path) -> None:
    project = write_project(tmp_path / "p", jobs=1, mib=5, seconds=0.1)
    slots_dir = tmp_path / "slots"
    other_build = slots.try_acquire(slots_dir, 1)  # another process on the host compiles in the only slot
    assert other_build is not None
    threading.Timer(3.0, other_build.release).start()
    options = BuildOptions(jobs=1, stall_timeout=1, slots_dir=slots_dir, progress="none", cache_dir=cache_dir)

    result = run_ninja(project.root, project.manifest, module="patient", options=options)

    assert result.attempts == 1 and all(p.exists() for p in project.outputs)


KILL_NINJA = """\
import os, sys, time, psutil
out, marker, started = sys.argv[1], sys.argv[2], sys.argv[3]
if not os.path.exists(marker):  # the first time only: SIGKILL ninja while the other job still compiles
    open(marker, "w").close()
    # Only once the slow job runs (its pid is written): killed sooner, its command may never have started, and
    # the retry's slow job, finding no pid file, would be "the first" and sleep its minute.
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not (os.path.exists(started) and open(started).read().strip()):
        time.sleep(0.01)
    ninja = next(p for p in psutil.Process().parents() if p.name() == "ninja")
    ninja.kill()
open(out, "w").close()
"""
SLOW_FIRST = """\
import os, sys, time
out, pidfile = sys.argv[1], sys.argv[2]
first = not os.path.exists(pidfile)
open(pidfile, "a").write(f"{os.getpid()}\\n")
if first:
    time.sleep(60)  # ninja dies meanwhile: this job is left without it
open(out, "w").close()
"""


def test_ninja_killed_mid_build_ends_the_attempt_at_once_and_leaves_no_orphan_job(
    tmp_path: Path, cache_dir: Path
) -> None:
    # ninja SIGKILLed (by the OOM killer, say) while a job runs: nobody stops that job but the runner, which
    # must end it at once (it would run on for a minute) and retry with fewer jobs.
    root = tmp_path / "p"
    root.mkdir()
    (root / "kill_ninja.py").write_text(KILL_NINJA)
    (root / "slow_first.py").write_text(SLOW_FIRST)
    (root / "build.ninja").write_text(
        f"rule killer\n  command = {sys.executable} kill_ninja.py $out {root / 'killed.marker'} {root / 'slow.pids'}\n"
        f"rule slow\n  command = {sys.executable} slow_first.py $out {root / 'slow.pids'}\n"
        "build slow.o: slow\nbuild killer.o: killer\ndefault slow.o killer.o\n"
    )
    options = BuildOptions(jobs=2, timeout=120, stall_timeout=60, progress="none", cache_dir=cache_dir)

    started = time.monotonic()
    result = run_ninja(root, root / "build.ninja", module="ninja-killed", options=options)

    assert time.monotonic() - started < 30, "the runner waited for the orphaned job"
    assert result.attempts == 2 and result.jobs == 1
    assert (root / "slow.o").exists() and (root / "killer.o").exists()
    first_slow = int((root / "slow.pids").read_text().split()[0])
    assert not running(first_slow)
    assert "ninja itself was killed by SIGKILL" in result.log_path.read_text()
