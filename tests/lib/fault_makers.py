"""Makers of real faults for the fault matrix (tests/faults/, docs/reliability.md): every fault is real.

- a foreign owner is a real ``chown`` to uid 65534 (``nobody``); a view without root's powers is a real process
  running as that user;
- a read-only or full disk is a real small tmpfs, mounted in a private mount namespace (``unshare --mount``)
  so it vanishes with the process under test;
- a planted link is a real symlink.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest

FOREIGN_UID = 65534  # nobody


def base_env(cache_dir: Path, **extra: str) -> dict[str, str]:
    """The environment of a jitguard process under test: its own cache dir, no colour, no inherited budget."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("JITGUARD_") and k not in ("MAX_JOBS", "NINJA_STATUS")
    }
    env.update(JITGUARD_CACHE_DIR=str(cache_dir), NO_COLOR="1", **extra)
    return env


def host_env(root: Path, store: Path, **extra: str) -> dict[str, str]:
    """One host of a fleet: every JIT cache an engine start fills, and jitguard's cache dir, under ``root``; the
    store a ``file://`` directory. ``extra`` sets or overrides any variable."""
    places = {
        "VLLM_CACHE_ROOT": str(root / "vllm"),
        "TRITON_CACHE_DIR": str(root / "triton"),
        "TORCHINDUCTOR_CACHE_DIR": str(root / "inductor"),
        "FLASHINFER_WORKSPACE_BASE": str(root / "fi"),
        "SGLANG_CACHE_DIR": str(root / "sglang"),
        "JITGUARD_SHARE": f"file://{store}",
    }
    return base_env(root / "jitguard", **{**places, **extra})


def jitguard(
    args: Sequence[str], env: Mapping[str, str], *, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    """Run the real CLI in a fresh process."""
    return subprocess.run(
        [sys.executable, "-m", "jitguard", *args],
        env=dict(env),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def assert_no_traceback(proc: subprocess.CompletedProcess[str]) -> None:
    assert "Traceback" not in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stdout, proc.stdout


def need_root() -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root (a foreign owner is made with chown, a tmpfs with mount)")


_NAMESPACES: bool | None = None


def need_mount_namespace() -> None:
    """Skip unless this process may make a private mount namespace and mount a tmpfs in it."""
    global _NAMESPACES
    need_root()
    if _NAMESPACES is None:
        if shutil.which("unshare") is None:
            _NAMESPACES = False
        else:
            probe = subprocess.run(
                ["unshare", "--mount", "sh", "-c", "mount -t tmpfs -o size=64k tmpfs /mnt"],
                capture_output=True,
                timeout=30,
            )
            _NAMESPACES = probe.returncode == 0
    if not _NAMESPACES:
        pytest.skip("cannot mount a tmpfs in a private mount namespace here (no CAP_SYS_ADMIN?)")


def on_tmpfs(
    mountpoint: Path,
    command: Sequence[str],
    env: Mapping[str, str],
    *,
    size: str = "256k",
    prepare: str = "",
    timeout: float = 300,
) -> subprocess.CompletedProcess[str]:
    """Run ``command`` with a fresh tmpfs of ``size`` on ``mountpoint``, after the shell lines ``prepare``
    (they run in the same namespace: fill the disk, remount it read-only, write a record)."""
    need_mount_namespace()
    mountpoint.mkdir(parents=True, exist_ok=True)
    script = f"mount -t tmpfs -o size={size},mode=0700 tmpfs {shlex.quote(str(mountpoint))} || exit 97\n"
    script += prepare + "\nexec " + shlex.join(command)
    proc = subprocess.run(
        ["unshare", "--mount", "sh", "-ec", script],
        env=dict(env),
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert proc.returncode != 97, proc.stderr
    return proc


def fill_disk(mountpoint: Path) -> str:
    """Shell lines that fill the file system of ``mountpoint`` to the last block."""
    target = shlex.quote(str(mountpoint / "filler"))
    return f"dd if=/dev/zero of={target} bs=4k 2>/dev/null || true"


def python(code: str) -> list[str]:
    """A command running ``code`` in this interpreter (with jitguard from the source tree)."""
    return [sys.executable, "-c", code]


def chown_foreign(path: Path) -> None:
    """Give ``path`` to another user, for real (root's chown)."""
    need_root()
    os.chown(path, FOREIGN_UID, FOREIGN_UID, follow_symlinks=False)


def as_nobody(code: str, env: Mapping[str, str]) -> subprocess.CompletedProcess[str]:
    """Run ``code`` as uid/gid 65534, a process without root's powers (setpriv drops them for real)."""
    need_root()
    if shutil.which("setpriv") is None:
        pytest.skip("needs setpriv to run a process as another user")
    argv = [
        "setpriv",
        f"--reuid={FOREIGN_UID}",
        f"--regid={FOREIGN_UID}",
        "--clear-groups",
        sys.executable,
        "-c",
    ]
    env = {**env, "HOME": "/nonexistent"}
    reach = subprocess.run([*argv, "import jitguard"], env=env, capture_output=True, text=True, timeout=60)
    if reach.returncode != 0:  # e.g. a venv in a 0700 directory: nobody cannot even import jitguard
        pytest.skip(f"uid {FOREIGN_UID} cannot import jitguard from this interpreter ({sys.executable})")
    return subprocess.run([*argv, code], env=env, capture_output=True, text=True, timeout=120)


def tiny_project(directory: Path, command: str = "echo built > $out") -> Path:
    """A real one-rule ninja project; returns its build.ninja."""
    directory.mkdir(parents=True, exist_ok=True)
    manifest = directory / "build.ninja"
    manifest.write_text(f"rule make\n  command = {command}\nbuild out.txt: make\n")
    return manifest
