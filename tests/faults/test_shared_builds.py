"""One build per manifest, whoever starts it: the others wait visibly, time out, or take over a dead holder.

Real `jitguard build ninja` processes (and the FlashInfer hook's ``run_ninja``) on one real ninja project whose
steps journal who ran them and notice a concurrent writer of the same output.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

from fault_projects import SharedProject, cli_build, write_shared_project

from jitguard.supervise.runner import BuildResult
from live_processes import reaping, survivors, wait_for

WORKER = Path(__file__).with_name("stampede_worker.py")
RANKS = 8
ROUNDS = 20
KILL_ROUNDS = (4, 13)  # the holder is SIGKILLed mid-build in these rounds


@contextlib.contextmanager
def _holding(project: SharedProject) -> Iterator[subprocess.Popen[str]]:
    """A `jitguard build ninja` of ``project`` that holds its lock, stopped in the middle of compiling until
    the block ends (or is killed in it)."""
    project.hold.touch()
    holder = cli_build(project.manifest, "--jobs", "2", "--progress", "none")
    with reaping([holder.pid]):
        wait_for(lambda: _started(project), "the holder to compile")
        try:
            yield holder
        finally:
            project.hold.unlink()
            holder.communicate(timeout=60)


def _builders(events: list[tuple[str, int, int, str]]) -> set[int]:
    return {owner for event, owner, _, _ in events if event == "start"}


def _started(project: SharedProject, since: int = 0) -> list[tuple[str, int, int, str]]:
    return [e for e in project.events(since) if e[0] == "start"]


def test_eight_builders_for_twenty_rounds_build_each_round_once_and_survive_a_holder_killed_mid_build(
    tmp_path: Path, cache_dir: Path
) -> None:
    project = write_shared_project(tmp_path / "p", delay=0.1)
    control = tmp_path / "control"
    control.mkdir()
    logs = tmp_path / "logs"
    logs.mkdir()
    env = {**os.environ, "JITGUARD_LOCK_TIMEOUT": "120"}

    def start(worker: int, first: int) -> subprocess.Popen[bytes]:
        argv = [
            sys.executable,
            str(WORKER),
            str(project.manifest),
            str(control),
            str(worker),
            str(first),
            str(ROUNDS),
        ]
        with open(logs / f"worker{worker}-from{first}.err", "wb") as err:
            return subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=err, env=env)

    workers = {worker: start(worker, 0) for worker in range(RANKS)}
    with reaping([w.pid for w in workers.values()]) as strays:
        for round_no in range(ROUNDS):
            project.clean()
            since = project.journal_size()
            (control / f"go-{round_no}").touch()
            killed: int | None = None
            victim: int | None = None
            if round_no in KILL_ROUNDS:
                wait_for(lambda: _started(project, since), f"a compile of round {round_no}")  # noqa: B023
                killed = _started(project, since)[0][1]
                (victim,) = [w for w, proc in workers.items() if proc.pid == killed]
                workers[victim].send_signal(signal.SIGKILL)
                workers[victim].wait(timeout=30)
                workers[victim] = start(victim, round_no + 1)
                strays.append(workers[victim].pid)
            waiting = [w for w in workers if w != victim]
            wait_for(
                lambda: all((control / f"done-{round_no}-{w}").exists() for w in waiting),  # noqa: B023
                f"every builder to finish round {round_no}",
                timeout=120,
            )

            events = project.events(since)
            codes = {w: (control / f"done-{round_no}-{w}").read_text() for w in waiting}
            assert set(codes.values()) == {"0"}, (round_no, codes)
            assert not [e for e in events if e[0] == "OVERLAP"], (round_no, events)
            assert project.built(), round_no
            builders = _builders(events) - {killed}
            assert len(builders) == 1, (round_no, events)  # one build per round, not one per rank
            started = [out for event, owner, _, out in events if event == "start" and owner in builders]
            assert sorted(started) == sorted(set(started)), (round_no, events)  # no step ran twice
            if killed is None:
                assert sorted(started) == ["a.o", "app", "b.o"], (round_no, events)
            else:
                remains = [pid for event, owner, pid, _ in events if owner == killed]
                assert survivors(remains, timeout=10) == [], round_no

    took_over = sum(p.read_text().count("taking over the build") for p in logs.iterdir())
    assert took_over == len(KILL_ROUNDS)


def test_a_second_build_waits_naming_the_holder_and_takes_over_when_the_holder_is_killed(
    tmp_path: Path, cache_dir: Path
) -> None:
    project = write_shared_project(tmp_path / "p")
    waiter_err = tmp_path / "waiter.err"
    with reaping([]) as strays:
        with _holding(project) as holder:
            waiter = cli_build(project.manifest, "--jobs", "2", "--progress", "none", stderr=waiter_err)
            strays.append(waiter.pid)
            named = f"lock held by pid {holder.pid}"
            wait_for(lambda: named in waiter_err.read_text(), "the waiter to name the holder")
            holder.send_signal(signal.SIGKILL)
        waiter.communicate(timeout=120)

    text = waiter_err.read_text()
    assert waiter.returncode == 0, text
    assert "taking over the build" in text and f"pid {holder.pid}" in text
    assert project.built()
    assert _builders(project.events()) == {holder.pid, waiter.pid}
    assert not [e for e in project.events() if e[0] == "OVERLAP"]


def test_a_build_waiting_longer_than_the_lock_timeout_fails_naming_the_holder(
    tmp_path: Path, cache_dir: Path
) -> None:
    project = write_shared_project(tmp_path / "p")
    with _holding(project) as holder:
        waiter = cli_build(project.manifest, "--json", env={"JITGUARD_LOCK_TIMEOUT": "2"})
        out, _ = waiter.communicate(timeout=60)

    assert waiter.returncode == 1
    payload = json.loads(out)
    assert [f["code"] for f in payload["findings"]] == ["lock-timeout"]
    assert f"pid {holder.pid}" in json.dumps(payload["findings"])
    # One verdict: this process never built it.
    assert re.fullmatch(
        r"Build of \S+ not started: waited .* for the build lock held by .*, then gave up", payload["detail"]
    )
    assert _builders(project.events()) == {holder.pid}


def test_the_flashinfer_run_ninja_hook_shares_the_build_of_a_directory(
    tmp_path: Path, cache_dir: Path
) -> None:
    # FlashInfer's own build path (AOT build_jit_specs, JitSpec.build) calls run_ninja without FlashInfer's
    # lock: it must still wait for a build of the same directory, then find nothing to do.
    from jitguard.flashinfer_jit.flashinfer_build import run_ninja_for_flashinfer

    project = write_shared_project(tmp_path / "p")
    outcome: list[BuildResult | BaseException] = []

    def hook() -> None:
        try:
            outcome.append(run_ninja_for_flashinfer(project.root, project.manifest))
        except BaseException as exc:
            outcome.append(exc)

    thread = threading.Thread(target=hook)
    with _holding(project) as holder:
        thread.start()
        thread.join(timeout=1.5)
        assert thread.is_alive() and not outcome  # waiting for the holder, not building beside it
    thread.join(timeout=60)

    (result,) = outcome
    assert isinstance(result, BuildResult), result
    assert result.attempts == 0 and project.built()
    assert _builders(project.events()) == {holder.pid}
