"""Two processes preparing the same engine release at once (two test runs, a developer's and CI's) once
corrupted a CI run: each deleted and rewrote the other's directories. The preparation scripts (.ci/install_*.sh)
take a per-release lock (.ci/preparation.sh); the second process says whom it waits for, then goes on once the
first is done. Real bash, flock and processes; nothing is downloaded."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
HOLD = '. .ci/preparation.sh && take_lock "$1" "$2" && echo taken && { read -r _ || true; }'


def start(lock: Path, who: str) -> subprocess.Popen[str]:
    """A bash process that takes ``lock`` as the scripts do and keeps it until its stdin closes."""
    return subprocess.Popen(
        ["bash", "-c", HOLD, "hold", str(lock), who],
        cwd=REPO,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def hold(lock: Path, who: str) -> subprocess.Popen[str]:
    """``start``, once it holds the lock."""
    proc = start(lock, who)
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "taken"
    return proc


def release(holder: subprocess.Popen[str]) -> None:
    assert holder.stdin is not None
    holder.stdin.close()
    assert holder.wait(timeout=30) == 0


def test_the_second_preparer_names_the_first_and_goes_on_when_it_is_done(tmp_path: Path) -> None:
    lock = tmp_path / "0.33.0.lock"
    first = hold(lock, "vllm 0.33.0")
    second = start(lock, "vllm 0.33.0")
    try:
        assert second.stdout is not None
        waiting = second.stdout.readline().strip()
        assert re.fullmatch(
            rf"vllm 0\.33\.0: waiting for pid {first.pid} preparing vllm 0\.33\.0 since \d\d:\d\d:\d\d, "
            rf"started by: .*{re.escape(Path(sys.executable).name)}.* \(lock {re.escape(str(lock))}\)",
            waiting,
        ), waiting
        release(first)
        assert second.stdout.readline().strip() == "taken"
        assert lock.read_text().startswith(f"pid {second.pid} preparing vllm 0.33.0 since ")
        release(second)
    finally:
        for proc in (first, second):
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


def test_install_vllm_waits_for_a_release_another_process_is_preparing(tmp_path: Path) -> None:
    root = tmp_path / "vllm"
    root.mkdir()
    holder = hold(root / "0.33.0.lock", "vllm 0.33.0")
    script = subprocess.Popen(
        ["bash", str(REPO / ".ci" / "install_vllm.sh")],
        env={
            **os.environ,
            "JITGUARD_VLLM_VERSIONS": "0.33.0",
            "JITGUARD_VLLM_ROOT": str(root),
            "JITGUARD_POOL": str(tmp_path / "pool"),
            "PYTHON": sys.executable,
        },
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        text=True,
        start_new_session=True,
    )
    try:
        assert script.stdout is not None
        line = script.stdout.readline().strip()
        assert line.startswith(f"vllm 0.33.0: waiting for pid {holder.pid} preparing vllm 0.33.0 since "), (
            line
        )
        assert not (root / "0.33.0").exists()  # nothing touched while the other one prepares
    finally:
        os.killpg(script.pid, signal.SIGKILL)
        script.wait()
        release(holder)
