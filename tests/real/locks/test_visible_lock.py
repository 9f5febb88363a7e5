"""The module build lock with REAL processes: one build for many ranks, visible waits, takeover, timeout."""

from __future__ import annotations

import logging
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import filelock
import psutil
import pytest

from jitguard.errors import LockTimeout
from jitguard.locks.visible_lock import ModuleLock, progress_from_log

WORKER = Path(__file__).with_name("lock_worker.py")


@dataclass
class Rank:
    proc: subprocess.Popen[bytes]
    out: Path
    err: Path

    def stdout(self) -> str:
        return self.out.read_text(errors="replace")

    def stderr(self) -> str:
        return self.err.read_text(errors="replace")


def _start(workdir: Path, n: int, env_extra: dict[str, str] | None = None) -> list[Rank]:
    env = {**os.environ, "JITGUARD_LOCK_TIMEOUT": "120", **(env_extra or {})}
    env.pop("JITGUARD_DISABLE", None)
    ranks = []
    for i in range(n):
        out, err = (
            workdir / f"rank{i}-{time.monotonic_ns()}.out",
            workdir / f"rank{i}-{time.monotonic_ns()}.err",
        )
        with open(out, "wb") as fo, open(err, "wb") as fe:
            proc = subprocess.Popen(
                [sys.executable, str(WORKER), str(workdir)], stdout=fo, stderr=fe, env=env
            )
        ranks.append(Rank(proc, out, err))
    return ranks


def _wait_for(condition: Callable[[], bool], what: str, ranks: list[Rank], timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.05)
    dump = "\n".join(f"--- rank {r.proc.pid}\n{r.stdout()}\n{r.stderr()}" for r in ranks)
    for r in ranks:
        r.proc.kill()
    pytest.fail(f"timed out waiting for {what}\n{dump}")


def _builder(ranks: list[Rank]) -> Rank | None:
    building = [r for r in ranks if "BUILDING" in r.stdout()]
    return building[0] if building else None


def _logged_holder(rank: Rank, holder_pid: int) -> bool:
    return re.search(rf"lock held by pid {holder_pid} on \S+ for .*progress 1/3", rank.stderr()) is not None


def _finish(ranks: list[Rank]) -> list[int | None]:
    return [r.proc.wait(timeout=120) for r in ranks]


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    (tmp_path / "tmp").mkdir()
    return tmp_path


def test_eight_ranks_one_build_the_others_wait_visibly_and_load_it(workdir: Path) -> None:
    ranks = _start(workdir, 8)
    _wait_for(lambda: _builder(ranks) is not None, "one rank to start building", ranks)
    builder = _builder(ranks)
    assert builder is not None
    waiters = [r for r in ranks if r is not builder]
    # Hold the build at step 1 until every other rank has said who it waits for and how far the build got.
    _wait_for(lambda: all(_logged_holder(r, builder.proc.pid) for r in waiters), "every waiter to log", ranks)
    (workdir / "go").touch()

    assert _finish(ranks) == [0] * 8
    assert sum("BUILT" in r.stdout() for r in ranks) == 1
    loaded = {line for r in ranks for line in r.stdout().splitlines() if line.startswith("LOADED")}
    assert loaded == {f"LOADED module built by {builder.proc.pid}"}
    assert not list((workdir / "tmp").glob("*.jitguard.json")), "the last holder must remove its sidecar"


def test_a_sigkilled_builder_is_taken_over_and_the_build_finishes(workdir: Path) -> None:
    ranks = _start(workdir, 4)
    _wait_for(lambda: _builder(ranks) is not None, "one rank to start building", ranks)
    builder = _builder(ranks)
    assert builder is not None
    survivors = [r for r in ranks if r is not builder]
    _wait_for(lambda: all(_logged_holder(r, builder.proc.pid) for r in survivors), "waiters to log", ranks)

    build_tree = psutil.Process(builder.proc.pid).children(recursive=True)
    assert build_tree, "the stand-in build should be running"
    builder.proc.send_signal(signal.SIGKILL)
    assert builder.proc.wait(timeout=30) == -signal.SIGKILL
    _, alive = psutil.wait_procs(build_tree, timeout=30)
    assert not alive, "the killed builder's build tree must not outlive it"
    (workdir / "go").touch()

    assert _finish(survivors) == [0, 0, 0]
    new_builders = [r for r in survivors if "BUILT" in r.stdout()]
    assert len(new_builders) == 1
    assert f"the previous holder (pid {builder.proc.pid} on" in new_builders[0].stderr()
    assert "taking over the build of standin_module" in new_builders[0].stderr()
    loaded = {line for r in survivors for line in r.stdout().splitlines() if line.startswith("LOADED")}
    assert loaded == {f"LOADED module built by {new_builders[0].proc.pid}"}


def test_waiting_past_the_lock_timeout_fails_with_lock_timeout(workdir: Path) -> None:
    holder = _start(workdir, 1)
    _wait_for(lambda: _builder(holder) is not None, "the holder to start building", holder)
    late = _start(workdir, 1, {"JITGUARD_LOCK_TIMEOUT": "1"})
    assert _finish(late) == [1]
    assert late[0].stdout().strip() == "FAILED lock-timeout"
    assert f"pid {holder[0].proc.pid}" in late[0].stderr()
    (workdir / "go").touch()
    assert _finish(holder) == [0]


def test_stock_flashinfer_filelock_and_module_lock_exclude_each_other(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """FlashInfer's own FileLock on the same path: our lock waits for it, and it waits for ours."""
    path = tmp_path / "gdn_prefill_sm90.lock"
    stock = filelock.FileLock(str(path), thread_local=False)
    stock.acquire()
    try:
        with caplog.at_level(logging.INFO, logger="jitguard"), pytest.raises(LockTimeout) as info:
            ModuleLock(path, "gdn_prefill_sm90", timeout=0.6, report_interval=0.1).acquire()
        assert [f.code for f in info.value.findings] == ["lock-timeout"]
        assert "waiting for the build of gdn_prefill_sm90" in caplog.text
        assert "stock FlashInfer" in caplog.text
    finally:
        stock.release()

    with ModuleLock(path, "gdn_prefill_sm90", timeout=5) as ours:
        assert ours.held
        with pytest.raises(filelock.Timeout):
            filelock.FileLock(str(path), thread_local=False).acquire(timeout=0.3)
    assert not ours.held
    filelock.FileLock(str(path), thread_local=False).acquire(timeout=1)


def test_the_holder_publishes_progress_and_log_then_removes_its_sidecar(tmp_path: Path) -> None:
    path = tmp_path / "m.lock"
    with ModuleLock(path, "m", timeout=1, log_path=tmp_path / "b.log") as lock:
        lock.update_progress(3, 34)
        waiter = ModuleLock(path, "m", timeout=0)
        holder = waiter.holder()
        assert holder is not None
        assert (holder.pid, holder.progress, holder.log_path) == (
            os.getpid(),
            (3, 34),
            str(tmp_path / "b.log"),
        )
        assert "progress 3/34" in holder.describe()
    assert not lock.sidecar_path.exists()
    assert ModuleLock(path, "m", timeout=0).holder() is None


def test_progress_is_read_from_the_tail_of_a_ninja_log(tmp_path: Path) -> None:
    log = tmp_path / "build.log"
    assert progress_from_log(log) is None
    log.write_text("ninja: Entering directory\n[1/34] nvcc a.cu\n[12/34] nvcc b.cu\nwarning: x\n")
    assert progress_from_log(log) == (12, 34)


def test_a_lock_path_that_cannot_be_created_is_a_clear_error_not_a_traceback(tmp_path: Path) -> None:
    from jitguard.errors import LockUnavailable
    from jitguard.locks.visible_lock import ModuleLock

    blocker = tmp_path / "not-a-dir"
    blocker.write_text("a file where the lock directory should be")
    lock = ModuleLock(blocker / "tmp" / "mod.lock", "mod", timeout=5)
    with pytest.raises(LockUnavailable) as info:
        lock.acquire()
    message = str(info.value)
    assert str(blocker / "tmp" / "mod.lock") in message and "Fix:" in message
    assert not lock.held
