"""No process of a build outlives jitguard: real processes, real signals, each containment this host allows.

The compile stand-in ignores SIGTERM and leaves a grandchild that double-forks and calls setsid (out of the
process group and the session), so neither "kill the process group" nor "kill the session" nor a polite
SIGTERM is enough: only the escalation to SIGKILL, the keeper's subreaper role or the cgroup end them.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import psutil
import pytest
from fault_projects import cli_build, write_shared_project, write_stubborn_project

from jitguard.errors import BuildFailed
from jitguard.supervise.runner import BuildOptions, run_ninja
from live_processes import read_pids, reaping, survivors


def _cli_build(manifest: Path, *flags: str) -> subprocess.Popen[bytes]:
    argv = [
        sys.executable,
        "-m",
        "jitguard.cli",
        "build",
        "ninja",
        str(manifest),
        "--progress",
        "none",
        *flags,
    ]
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def _tree(pid: int) -> set[int]:
    try:
        return {p.pid for p in psutil.Process(pid).children(recursive=True)}
    except psutil.Error:
        return set()


def test_sigkill_of_jitguard_while_the_compiler_ignores_sigterm_leaves_no_process_behind(
    tmp_path: Path, cache_dir: Path, containment: str
) -> None:
    pids_file = write_stubborn_project(tmp_path / "p", escape=True)
    runner = cli_build(tmp_path / "p" / "build.ninja", "--jobs", "1", "--progress", "none")
    with reaping([runner.pid]) as strays:
        stubborn = read_pids(pids_file, 2)
        strays += stubborn
        tree = _tree(runner.pid) | set(stubborn)  # keeper, ninja, launcher, compiler, the setsid grandchild
        runner.send_signal(signal.SIGKILL)
        runner.communicate(timeout=30)

        left = survivors(tree)
        assert left == [], [psutil.Process(p).cmdline() for p in left if psutil.pid_exists(p)]


def test_the_slots_of_a_sigkilled_build_are_free_for_the_next_build(tmp_path: Path, cache_dir: Path) -> None:
    # The dead build held the only slot (1 job); the next, unrelated build must get it, not time out.
    pids_file = write_stubborn_project(tmp_path / "dead", escape=False)
    runner = cli_build(tmp_path / "dead" / "build.ninja", "--jobs", "1", "--progress", "none")
    with reaping([runner.pid]) as strays:
        strays += read_pids(pids_file, 1)
        runner.send_signal(signal.SIGKILL)
        runner.communicate(timeout=30)
        project = write_shared_project(tmp_path / "next")
        options = BuildOptions(jobs=1, timeout=60, stall_timeout=60, progress="none", cache_dir=cache_dir)

        result = run_ninja(project.root, project.manifest, module="next", options=options)

        assert result.attempts == 1 and project.built()


def test_a_double_forked_setsid_child_dies_with_a_stalled_build(
    tmp_path: Path, cache_dir: Path, containment: str
) -> None:
    pids_file = write_stubborn_project(tmp_path / "p", escape=True)
    options = BuildOptions(
        jobs=1, timeout=120, stall_timeout=2, kill_grace=1, progress="none", cache_dir=cache_dir
    )
    with pytest.raises(BuildFailed) as failed:
        run_ninja(tmp_path / "p", tmp_path / "p" / "build.ninja", module="stalls", options=options)

    with reaping(read_pids(pids_file, 2)) as stubborn:
        assert [f.code for f in failed.value.findings] == ["build-stalled"]
        assert survivors(stubborn, timeout=5) == []


def test_a_sigkilled_parent_takes_the_whole_tree_with_it_through_the_keeper(
    tmp_path: Path, containment: str
) -> None:
    # The tree's root is jitguard's keeper, not the command: a parent that dies without any cleanup (SIGKILL)
    # still takes the command, its children and the escaped grandchild with it, through the keeper alone.
    pids_file = write_stubborn_project(tmp_path / "p", escape=True)
    code = (
        "import sys, time\n"
        "from jitguard.supervise.process_tree import ProcessTree\n"
        f"t = ProcessTree.start([sys.executable, 'stubborn.py', {str(pids_file)!r}, 'escape'], grace=1, "
        f"cwd={str(tmp_path / 'p')!r}, stdout=None)\n"
        "print(t.command_pid, flush=True)\n"
        "time.sleep(300)\n"
    )
    parent = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    with reaping([parent.pid]) as strays:
        assert parent.stdout is not None
        command_pid = int(parent.stdout.readline())
        stubborn = read_pids(pids_file, 2)
        strays += stubborn
        assert command_pid in stubborn
        tree = _tree(parent.pid) | set(stubborn)
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait(timeout=30)

        assert survivors(tree) == []
