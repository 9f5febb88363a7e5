"""Real services for the fleet tests, started by the test on 127.0.0.1 and stopped after it: redis-server (the
Debian package; .ci/install_services.sh installs it) and moto's S3-compatible server (``moto[server]``).
Each test that needs one skips with a one-line reason when it is not installed."""

from __future__ import annotations

import contextlib
import importlib.util
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

NEEDS_FSSPEC = pytest.mark.skipif(
    importlib.util.find_spec("fsspec") is None, reason="needs fsspec (pip install fsspec: the 'share' extra)"
)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _wait_for(port: int, proc: subprocess.Popen[bytes], what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"{what} exited with status {proc.returncode} before it listened on {port}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return
        time.sleep(0.1)
    pytest.fail(f"{what} did not listen on 127.0.0.1:{port} within {timeout:g} s")


@contextlib.contextmanager
def _running(argv: list[str], port: int, what: str, log: Path) -> Iterator[None]:
    with open(log, "wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    try:
        _wait_for(port, proc, what)
        yield
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@contextlib.contextmanager
def redis_server(directory: Path) -> Iterator[str]:
    """A real redis-server on a free local port; yields its ``redis://`` endpoint."""
    binary = shutil.which("redis-server")
    if binary is None:
        pytest.skip("needs redis-server (apt-get install redis-server; .ci/install_services.sh)")
    port = free_port()
    directory.mkdir(parents=True, exist_ok=True)
    argv = [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
    argv += ["--dir", str(directory), "--protected-mode", "no"]
    with _running(argv, port, "redis-server", directory / "redis.log"):
        yield f"redis://127.0.0.1:{port}"


@contextlib.contextmanager
def s3_server(directory: Path) -> Iterator[str]:
    """moto's S3-compatible HTTP server on a free local port; yields its endpoint URL."""
    try:
        import moto.server  # noqa: F401
    except ImportError:
        pytest.skip("needs moto's server mode (pip install 'moto[server]')")
    port = free_port()
    directory.mkdir(parents=True, exist_ok=True)
    argv = [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)]
    with _running(argv, port, "moto_server", directory / "moto.log"):
        yield f"http://127.0.0.1:{port}"


@contextlib.contextmanager
def silent_server() -> Iterator[int]:
    """A TCP port that accepts connections and never answers: a store or cache endpoint that hangs."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    try:
        yield int(listener.getsockname()[1])
    finally:
        listener.close()
