"""A real Triton release for tests, installed once per machine under JITGUARD_TRITON_ROOT (``pip install
--no-deps --target``; the same directory tests/real/test_triton_jit.py uses): its compiler runs on a CPU-only
host for an explicit GPU target, so kernels really compile and really hit Triton's cache."""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from release_preparation import CI_ROOT

ROOT = Path(os.environ.get("JITGUARD_TRITON_ROOT") or CI_ROOT / "triton")


def real_triton(version: str = "3.6.0") -> Path:
    """The directory holding ``triton`` ``version`` (put it on PYTHONPATH); skips (fails under CI) when pip
    cannot install it."""
    target = ROOT / f"triton-{version}"
    ROOT.mkdir(parents=True, exist_ok=True)
    with open(ROOT / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (target / "ready").exists():
            shutil.rmtree(target, ignore_errors=True)
            command = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target)]
            proc = subprocess.run(
                [*command, f"triton=={version}"],
                capture_output=True,
                text=True,
                timeout=900,
                stdin=subprocess.DEVNULL,
            )
            if proc.returncode != 0:
                message = f"could not install triton=={version}: {(proc.stdout + proc.stderr).strip()[-500:]}"
                if os.environ.get("CI"):
                    pytest.fail(message)
                pytest.skip(message)
            (target / "ready").touch()
    return target
