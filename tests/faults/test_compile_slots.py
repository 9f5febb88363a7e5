"""Host-wide compile slots: a slot held by what a dead build left is reclaimed; a waiting build names who holds.

The holder is a real launcher holding a real flock'ed slot with a real compile under it, started exactly as a
build starts it (the runner's environment names the build's jitguard process and module), but detached from
any keeper: what is left on the host when jitguard and its keeper were both SIGKILLed.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from fault_projects import write_shared_project, write_stubborn_project

from jitguard.errors import BuildFailed
from jitguard.supervise import slots
from jitguard.supervise.keeper import start_time
from jitguard.supervise.launcher import SLOT_COUNT_ENV, SLOTS_DIR_ENV
from jitguard.supervise.runner import BuildOptions, run_ninja
from live_processes import read_pids, reaping, survivors


def _owner_of_a_dead_build() -> str:
    """``pid:start`` of a jitguard process that has exited."""
    gone = subprocess.Popen(["sleep", "30"])
    ticks = start_time(gone.pid)
    gone.kill()
    gone.wait()
    return f"{gone.pid}:{ticks}"


def _holder(tmp_path: Path, slots_dir: Path, owner: str, module: str) -> tuple[subprocess.Popen[bytes], int]:
    """A launcher holding slot 0 of 1 for ``owner``'s build of ``module``; returns it and its compile's pid."""
    pids_file = write_stubborn_project(tmp_path / "holder", escape=False)
    env = {
        **os.environ,
        SLOTS_DIR_ENV: str(slots_dir),
        SLOT_COUNT_ENV: "1",
        slots.OWNER_ENV: owner,
        slots.MODULE_ENV: module,
    }
    launcher = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "jitguard.supervise.launcher",
            "--",
            sys.executable,
            "stubborn.py",
            str(pids_file),
            "stay",
        ],
        cwd=tmp_path / "holder",
        env=env,
        start_new_session=True,
    )
    (compile_pid,) = read_pids(pids_file, 1)
    assert slots.try_acquire(slots_dir, 1) is None  # the only slot is taken
    return launcher, compile_pid


def test_a_slot_held_by_the_remains_of_a_dead_build_is_reclaimed_for_the_next_build(
    tmp_path: Path, cache_dir: Path
) -> None:
    slots_dir = tmp_path / "slots"
    launcher, compile_pid = _holder(tmp_path, slots_dir, _owner_of_a_dead_build(), "dead-module")
    with reaping([launcher.pid, compile_pid]):
        project = write_shared_project(tmp_path / "next")
        options = BuildOptions(
            jobs=1, timeout=30, stall_timeout=60, slots_dir=slots_dir, progress="none", cache_dir=cache_dir
        )

        result = run_ninja(project.root, project.manifest, module="next", options=options)

        assert result.attempts == 1 and project.built()
        assert survivors([compile_pid], timeout=5) == []
        log = result.log_path.read_text()
        assert "reclaimed a compile slot from a dead build" in log and f"pid {compile_pid}" in log


def test_a_build_waiting_for_slots_names_the_live_holders(tmp_path: Path, cache_dir: Path) -> None:
    slots_dir = tmp_path / "slots"
    me = f"{os.getpid()}:{start_time(os.getpid())}"  # a live build: its slot must not be taken from it
    launcher, compile_pid = _holder(tmp_path, slots_dir, me, "other-module")
    with reaping([launcher.pid, compile_pid]):
        project = write_shared_project(tmp_path / "waits")
        options = BuildOptions(
            jobs=1, timeout=5, stall_timeout=60, slots_dir=slots_dir, progress="none", cache_dir=cache_dir
        )

        with pytest.raises(BuildFailed) as failed:
            run_ninja(project.root, project.manifest, module="waits", options=options)

        (finding,) = failed.value.findings
        assert finding.code == "build-timeout"
        named = [line for line in finding.evidence if "waiting for a compile slot" in line]
        assert any(f"pid {compile_pid}" in line and "other-module" in line for line in named), (
            finding.evidence
        )
        assert f"by jitguard pid {os.getpid()}" in " ".join(named)
        assert (
            "waiting for a compile slot; other builds hold them"
            in Path(failed.value.log_path or "").read_text()
        )
        assert survivors([compile_pid], timeout=0.1) == [compile_pid]  # a live build's holder is left alone
