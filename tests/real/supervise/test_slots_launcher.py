"""Host-wide compile slots and the launcher that holds one, with real flocks and real processes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from jitguard.supervise import slots
from jitguard.supervise.launcher import KILLED_MARKER, SLOT_COUNT_ENV, SLOTS_DIR_ENV


def test_slots_are_taken_lowest_first_and_run_out(tmp_path: Path) -> None:
    held = [slots.try_acquire(tmp_path, 2) for _ in range(2)]
    assert [s.index for s in held if s] == [0, 1]
    assert slots.try_acquire(tmp_path, 2) is None
    assert slots.holders(tmp_path) == {0: os.getpid(), 1: os.getpid()}
    held[0].release()  # type: ignore[union-attr]
    again = slots.try_acquire(tmp_path, 2)
    assert again is not None and again.index == 0


def test_a_slot_held_by_a_killed_process_is_free_at_once(tmp_path: Path) -> None:
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            f"from jitguard.supervise import slots; s = slots.acquire({str(tmp_path)!r}, 1); "
            "print(s.index, flush=True); import time; time.sleep(60)",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "0"
        assert slots.try_acquire(tmp_path, 1) is None
        holder.kill()
        holder.wait()
        assert slots.acquire(tmp_path, 1, timeout=5) is not None
    finally:
        holder.kill()


def _launch(tmp_path: Path, *command: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, **{SLOTS_DIR_ENV: str(tmp_path / "slots"), SLOT_COUNT_ENV: "1"})
    argv = [sys.executable, "-m", "jitguard.supervise.launcher", "--", *command]
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)


def test_launcher_runs_the_command_in_a_slot_and_returns_its_status(tmp_path: Path) -> None:
    done = _launch(
        tmp_path, sys.executable, "-c", "import os, sys; print(os.environ['JITGUARD_SLOT']); sys.exit(3)"
    )
    assert done.returncode == 3
    assert done.stdout.strip() == "0"


def test_launcher_says_when_its_command_is_killed_by_sigkill(tmp_path: Path) -> None:
    done = _launch(tmp_path, sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGKILL)")
    assert done.returncode == 128 + signal.SIGKILL
    assert f"{KILLED_MARKER} 9 (SIGKILL)" in done.stderr


def test_launcher_waits_while_another_process_holds_the_only_slot(tmp_path: Path) -> None:
    held = slots.try_acquire(tmp_path / "slots", 1)
    assert held is not None
    env = dict(os.environ, **{SLOTS_DIR_ENV: str(tmp_path / "slots"), SLOT_COUNT_ENV: "1"})
    marker = tmp_path / "ran"
    waiting = subprocess.Popen(
        [sys.executable, "-m", "jitguard.supervise.launcher", "--", "touch", str(marker)], env=env
    )
    try:
        time.sleep(1.0)
        assert waiting.poll() is None and not marker.exists()  # still waiting for the slot
        held.release()
        assert waiting.wait(timeout=30) == 0 and marker.exists()
    finally:
        waiting.kill()


def test_launcher_without_slot_settings_just_runs_the_command(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in (SLOTS_DIR_ENV, SLOT_COUNT_ENV)}
    done = subprocess.run(
        [sys.executable, "-m", "jitguard.supervise.launcher", "--", "true"],
        env=env,
        capture_output=True,
        timeout=60,
    )
    assert done.returncode == 0
