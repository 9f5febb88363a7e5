"""A real out-of-memory kill: the kernel kills a compile job inside a memory cgroup, the runner classifies it and
finishes the build with fewer jobs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from ninja_projects import MIB, write_project

V1_MEMORY = Path("/sys/fs/cgroup/memory")
LIMIT = 320 * MIB  # the runner (~50 MiB) and one 150 MiB job fit; two jobs do not


def _oom_kills(cgroup: Path) -> int:
    for line in (cgroup / "memory.oom_control").read_text().splitlines():
        name, _, value = line.partition(" ")
        if name == "oom_kill":
            return int(value)
    raise AssertionError("no oom_kill counter")


@pytest.fixture
def memory_cgroup() -> Iterator[Path]:
    """A fresh cgroup v1 memory cgroup with a 320 MiB limit, removed afterwards."""
    if not (V1_MEMORY / "memory.limit_in_bytes").is_file():
        pytest.skip("needs a cgroup v1 memory controller at /sys/fs/cgroup/memory")
    cgroup = V1_MEMORY / f"jitguard-test-{uuid.uuid4().hex[:8]}"
    try:
        cgroup.mkdir()
        (cgroup / "memory.limit_in_bytes").write_text(str(LIMIT))
        if (cgroup / "memory.memsw.limit_in_bytes").is_file():
            # Without this the kernel could swap instead of killing (no swap here, but be explicit).
            (cgroup / "memory.memsw.limit_in_bytes").write_text(str(LIMIT))
    except OSError as exc:
        if cgroup.exists():
            cgroup.rmdir()
        pytest.skip(f"cannot create a limited memory cgroup here: {exc}")
    try:
        yield cgroup
    finally:
        for _ in range(50):  # the last processes may take a moment to leave
            try:
                cgroup.rmdir()
                break
            except OSError:
                time.sleep(0.1)


def test_oom_killed_job_is_detected_and_the_build_succeeds_with_fewer_jobs(
    tmp_path: Path, cache_dir: Path, memory_cgroup: Path
) -> None:
    project = write_project(tmp_path / "p", jobs=2, mib=150, seconds=1.5)
    log = tmp_path / "build.log"
    build = [sys.executable, "-m", "jitguard.cli", "build", "ninja", str(project.manifest), "--jobs", "2"]
    build += ["--log", str(log), "--progress", "none", "--json"]
    # Join the cgroup, then become the runner: the runner, ninja and every job live under the limit.
    joined = f'echo $$ > {memory_cgroup / "cgroup.procs"} && exec "$@"'
    before = _oom_kills(memory_cgroup)

    proc = subprocess.run(["sh", "-c", joined, "sh", *build], capture_output=True, text=True, timeout=180)

    assert _oom_kills(memory_cgroup) > before, "the kernel did not kill anything: the test proves nothing"
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["attempts"] == 2 and result["jobs"] == 1
    assert all(p.exists() for p in project.outputs)
    text = log.read_text()
    assert "killed for lack of memory" in text and "retrying with 1 job" in text
    # ninja kept the object that finished: the second attempt built only what the kill interrupted.
    second = text.split("attempt 2:", 1)[1]
    assert "[1/1]" in second and "[1/2]" not in second


def test_oom_kill_at_one_job_fails_with_the_oom_finding_and_the_log(
    tmp_path: Path, cache_dir: Path, memory_cgroup: Path
) -> None:
    project = write_project(tmp_path / "p", jobs=1, mib=400, seconds=0.5)  # cannot fit even alone
    log = tmp_path / "build.log"
    build = [sys.executable, "-m", "jitguard.cli", "build", "ninja", str(project.manifest), "--jobs", "1"]
    build += ["--log", str(log), "--progress", "none", "--json"]
    joined = f'echo $$ > {memory_cgroup / "cgroup.procs"} && exec "$@"'

    proc = subprocess.run(["sh", "-c", joined, "sh", *build], capture_output=True, text=True, timeout=180)

    assert proc.returncode == 1
    payload = json.loads(proc.stdout)
    codes = [f["code"] for f in payload["findings"]]
    assert codes[0] == "build-oom-killed"
    assert payload["log_path"] == str(log)
    evidence = " ".join(payload["findings"][0]["evidence"])
    assert "signal 9" in evidence or "oom_kill" in evidence
    assert str(log) in payload["findings"][0]["cause"]
    assert os.path.exists(log)
