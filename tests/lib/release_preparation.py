"""The engine releases the real tests run against (tests/real/vllm, tests/real/sglang), prepared by one run of
``.ci/install_<engine>.sh`` for every release of the session: the script prepares them in parallel, each under
its own lock, and caches them. The run starts as soon as collection has selected a test that needs a release
(``start_when_selected``), at low CPU priority: a cold preparation is mostly downloads, which then overlap with
the tests that run before the engine tests. Its progress lines reach the terminal while a test waits for a
release (past pytest's capture, no ``-s`` needed); a release that cannot be prepared is one line saying why."""

from __future__ import annotations

import os
import queue
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Mapping
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PREPARE_ONE_TIMEOUT = 1800  # seconds: one release, cold, on a busy 2-core machine
# Everything the tests prepare (engine releases, the package pool, FlashInfer releases, Triton's stand-ins) lies
# under one root, JITGUARD_CI_ROOT; each part can still be moved on its own (README.md, "The two commands").
CI_ROOT = Path(os.environ.get("JITGUARD_CI_ROOT") or "/tmp/jitguard-ci")
VLLM_ROOT = Path(os.environ.get("JITGUARD_VLLM_ROOT") or CI_ROOT / "vllm")  # .ci/install_vllm.sh's default


class NotPrepared(Exception):
    """A release the script could not prepare; the message is one line saying why and where the log is."""


def terminal(config: pytest.Config) -> Callable[[str], None]:
    """Write a line to the terminal now, past pytest's output capture."""
    capture = config.pluginmanager.getplugin("capturemanager")
    reporter = config.pluginmanager.getplugin("terminalreporter")

    def say(line: str) -> None:
        if capture is None or reporter is None:
            print(line, file=sys.stderr, flush=True)
            return
        with capture.global_and_fixture_disabled():
            reporter.write_line(line)

    return say


class Preparation:
    """One run of ``.ci/install_<engine>.sh`` for ``versions``, started at once; ``get`` waits for one."""

    def __init__(
        self, engine: str, versions: list[str], root: Path, env: Mapping[str, str], *, timeout: float
    ) -> None:
        self._engine, self._root, self._timeout = engine, root, timeout
        self._ready: dict[str, str] = {}
        self._failed: dict[str, str] = {}
        self._outcome = ""
        self._lines: queue.Queue[str | None] = queue.Queue()
        self._proc = subprocess.Popen(
            ["nice", "-n", "10", "bash", str(REPO / ".ci" / f"install_{engine}.sh")],
            env={**os.environ, **env, "PYTHON": sys.executable},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            text=True,
            start_new_session=True,  # its own process group: a timeout stops pip too, not only the script
        )
        self._watchdog = threading.Timer(timeout, os.killpg, (self._proc.pid, signal.SIGKILL))
        self._watchdog.start()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self._proc.stdout is not None
        for raw in self._proc.stdout:
            self._lines.put(raw.rstrip())
        self._lines.put(None)

    def get(self, version: str, say: Callable[[str], None]) -> str:
        """What the script's ``<engine> <version>: [...] ready: VALUE`` line says, passing its lines to ``say``
        until then; ``NotPrepared`` when it failed, timed out or ended without that line."""
        ready = re.compile(rf"{re.escape(self._engine)} (\S+): \[\d+ s\] ready: (\S+)")
        failed = re.compile(rf"{re.escape(self._engine)} (\S+): FAILED")
        try:
            while version not in self._ready and version not in self._failed:
                line = self._lines.get()
                if line is None:
                    self._finished()
                    break
                say(line)
                if m := ready.match(line):
                    self._ready[m.group(1)] = m.group(2)
                elif m := failed.match(line):
                    self._failed[m.group(1)] = "it failed"
        except BaseException:  # Ctrl-C or pytest-timeout: no pip left running
            self.stop()
            raise
        if version in self._ready:
            return self._ready[version]
        log = self._root / f"{version}.log"
        how = self._outcome or self._failed.get(version, f"no 'ready' line for {version}")
        raise NotPrepared(
            f"{self._engine} {version} could not be prepared (.ci/install_{self._engine}.sh: {how})"
            f"{_last_error(log)}; full log: {log}"
        )

    def _finished(self) -> None:
        status = self._proc.wait()
        self._watchdog.cancel()
        if status == -signal.SIGKILL:
            self._outcome = f"timed out after {self._timeout:.0f} s"

    def stop(self) -> None:
        if self._proc.poll() is None:
            os.killpg(self._proc.pid, signal.SIGKILL)
            self._proc.wait()
        self._watchdog.cancel()


def start_when_selected(
    session: pytest.Session,
    directory: Path,
    key: pytest.StashKey[Preparation],
    start: Callable[[], Preparation],
) -> None:
    """From a conftest's ``pytest_collection_finish``: ``start()`` now, kept under ``key``, when a selected test
    under ``directory`` uses the ``release`` fixture."""
    for item in session.items:
        if "release" in getattr(item, "fixturenames", ()) and Path(item.path).is_relative_to(directory):
            session.config.stash[key] = start()
            return


def _last_error(log: Path) -> str:
    """': <pip's last 'ERROR:' line>' (or the log's last line), cut to fit in one line; '' without a log."""
    try:
        lines = [line.strip() for line in log.read_text(errors="replace").splitlines() if line.strip()]
    except OSError:
        return ""
    errors = [line for line in lines if line.startswith("ERROR:")]
    last = (errors or lines or [""])[-1]
    return f": {last[:200]}" if last else ""


def skip_or_fail(message: str) -> None:
    """A release that could not be prepared skips its own tests, or fails them under CI."""
    if os.environ.get("CI"):
        pytest.fail(message, pytrace=False)
    pytest.skip(message)


def vllm_source(version: str) -> Path:
    """The Python sources of one vLLM release, for a test outside tests/real/vllm that reads them: prepared now
    by .ci/install_vllm.sh when they are not yet (under the release's lock, so a preparation already running
    in another worker or run finishes first, then this finds it ready); skips, or fails under CI, when it
    cannot be prepared."""
    env = {"JITGUARD_VLLM_VERSIONS": version, "JITGUARD_VLLM_ROOT": str(VLLM_ROOT)}
    preparation = Preparation("vllm", [version], VLLM_ROOT, env, timeout=PREPARE_ONE_TIMEOUT)
    try:
        preparation.get(version, lambda line: None)
    except NotPrepared as exc:
        skip_or_fail(str(exc))
    finally:
        preparation.stop()
    return VLLM_ROOT / version / "src"
