"""Fixtures of the fault matrix: an isolated jitguard cache, and the containment a build tree runs in."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from jitguard.supervise import build_cgroup

CONTAINMENTS = ("v2", "freezer", "off")


@pytest.fixture
def cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """An isolated jitguard cache (logs, slots, learned memory) for the test and its subprocesses."""
    path = tmp_path / "jitguard-cache"
    monkeypatch.setenv("JITGUARD_CACHE_DIR", str(path))
    for name in (
        "JITGUARD_MEMORY_BUDGET",
        "JITGUARD_JOB_MEMORY",
        "MAX_JOBS",
        "NINJA_STATUS",
        "JITGUARD_DISABLE",
    ):
        monkeypatch.delenv(name, raising=False)
    yield path


@pytest.fixture(params=CONTAINMENTS, ids=[f"cgroup-{c}" for c in CONTAINMENTS])
def containment(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Each way a build tree is contained: a cgroup v2, a cgroup v1 freezer, or none (the keeper alone: its
    session, subreaper role and PDEATHSIG). A kind this host does not let us create is skipped, saying why."""
    kind = request.param
    if kind != "off":
        probe = build_cgroup.create(kind)
        if probe is None:
            pytest.skip(
                f"cannot make a {kind} cgroup here (needs root or a delegated cgroup, and for v2 a cgroup2 "
                "mount with cgroup.kill, Linux 5.14+)"
            )
        probe.remove()
    monkeypatch.setenv(build_cgroup.CGROUP_ENV, kind)
    return str(kind)
