"""The compiler cache at one compile: the launcher's half of ``fleet.compiler_cache``.

The launcher asks ``wrapper_for`` whether a compile goes through sccache (the attempt uses the cache and the
command is a known compiler with ``-c``), starts the attempt's server once (``ensure_server``: the first
launcher starts it under a lock, a server that cannot start is written down so no other launcher tries again),
and keeps the server's counters after its compile (``snapshot_stats``). The files it leaves in the attempt's
directory (socket, stats, why the server did not start) are what the runner's ``Session`` reads.

stdlib only: it runs once per compile command.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# What the runner hands the launchers of one attempt.
ATTEMPT_DIR_ENV = "JITGUARD_SCCACHE_ATTEMPT_DIR"
ATTEMPT_BINARY_ENV = "JITGUARD_SCCACHE_BIN"
_COMPILERS = ("nvcc", "c++", "g++", "gcc", "cc", "clang", "clang++")
_WRAPPERS = ("sccache", "ccache", "distcc")
SOCKET_FILE = "server.sock"
STATS_FILE = "stats.json"
BROKEN_FILE = "broken.txt"
_START_TIMEOUT_S = 30.0  # sccache itself gives up after 10 s when its backend is unreachable
_STATS_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class Wrapper:
    """How the launcher runs one compile through sccache."""

    binary: str
    directory: Path

    @property
    def socket(self) -> Path:
        return self.directory / SOCKET_FILE


def wrapper_for(command: Sequence[str], env: Mapping[str, str]) -> Wrapper | None:
    """The sccache wrapper for ``command`` when the attempt uses the compiler cache and ``command`` is a compile
    (a known compiler with ``-c``, not already behind a compiler wrapper); else None."""
    directory = env.get(ATTEMPT_DIR_ENV)
    binary = env.get(ATTEMPT_BINARY_ENV)
    if not directory or not binary or not command:
        return None
    name = os.path.basename(command[0])
    if name in _WRAPPERS or "-c" not in command[1:]:
        return None
    if not any(name == c or name.endswith("-" + c) for c in _COMPILERS):
        return None
    return Wrapper(binary, Path(directory))


def _connectable(path: Path) -> bool:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.settimeout(1.0)
        sock.connect(str(path))
        return True
    except OSError:
        return False
    finally:
        sock.close()


@contextlib.contextmanager
def _locked(path: Path) -> Any:
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def ensure_server(wrapper: Wrapper) -> str | None:
    """Start the attempt's sccache server unless it runs. None when it is up; else why not (then left in the
    attempt's directory, so no other launcher of the attempt tries again)."""
    broken = wrapper.directory / BROKEN_FILE
    if broken.exists():
        return read_text(broken) or "sccache did not start"
    if _connectable(wrapper.socket):
        return None
    with _locked(wrapper.directory / "start.lock"):
        if broken.exists():
            return read_text(broken) or "sccache did not start"
        if _connectable(wrapper.socket):
            return None
        # Output to a file, never a pipe: whatever sccache leaves running must not hold ninja's pipe open.
        with tempfile.TemporaryFile(dir=wrapper.directory) as out:
            try:
                proc = subprocess.run(
                    [wrapper.binary, "--start-server"],
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    timeout=_START_TIMEOUT_S,
                )
                out.seek(0)
                text = out.read().decode("utf-8", "replace")
                problem = None
                if proc.returncode != 0 or not _connectable(wrapper.socket):
                    lines = [
                        line for line in text.splitlines() if "error" in line.lower()
                    ] or text.splitlines()
                    problem = f"the sccache server did not start: {' '.join(lines[-2:])[:300] or 'no output'}"
            except subprocess.TimeoutExpired:
                problem = f"the sccache server did not start within {_START_TIMEOUT_S:g} s"
            except OSError as exc:
                problem = f"cannot run {wrapper.binary}: {exc.strerror or exc}"
        if problem is not None:
            _write_atomically(broken, problem + "\n")
        return problem


def snapshot_stats(wrapper: Wrapper) -> None:
    """Keep the server's counters in the attempt's directory (the snapshot with the most compile requests
    wins). Best effort: a missing snapshot only means the build reports no stats."""
    if not _connectable(wrapper.socket):
        return
    try:
        proc = subprocess.run(
            [wrapper.binary, "--show-stats", "--stats-format", "json"],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=_STATS_TIMEOUT_S,
        )
        data = json.loads(proc.stdout.decode("utf-8", "replace"))
    except (OSError, subprocess.TimeoutExpired, ValueError):
        return
    if not isinstance(data, dict):
        return
    target = wrapper.directory / STATS_FILE
    with contextlib.suppress(OSError), _locked(wrapper.directory / "stats.lock"):
        previous = read_json(target) or {}
        if _requests(data) >= _requests(previous):
            _write_atomically(target, json.dumps(data))


def _requests(data: Mapping[str, Any]) -> int:
    stats = data.get("stats")
    value = stats.get("compile_requests", -1) if isinstance(stats, dict) else -1
    return value if isinstance(value, int) else -1


def _write_atomically(path: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def read_json(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def read_text(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8", errors="replace").strip() or None
    except OSError:
        return None
