"""The memory budget: how many compile jobs fit, for the H200 build host and in containers; ninja's own
default, checked against the real ninja."""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest

from jitguard.config import parse_memory_spec
from jitguard.errors import UsageError
from jitguard.facts import memory
from jitguard.facts.capacity import (
    DEFAULT_JOB_MEMORY,
    MIN_HEADROOM,
    headroom_for,
    ninja_default_jobs,
    plan_jobs,
)
from jitguard.facts.memory import CgroupLevel, MemoryFacts

GIB = 1024**3


def machine(
    *,
    avail_gib: float | None,
    cpus: int,
    limit_gib: float | None = None,
    used_gib: float = 0,
    quota: float | None = None,
) -> MemoryFacts:
    levels = ()
    if limit_gib is not None:
        levels = (CgroupLevel("/sys/fs/cgroup/test", int(limit_gib * GIB), int(used_gib * GIB), 0),)
    return MemoryFacts(
        mem_total=None if avail_gib is None else int(avail_gib * GIB) + GIB,
        mem_available=None if avail_gib is None else int(avail_gib * GIB),
        cgroup_version="v2" if levels else None,
        cgroup_path="/sys/fs/cgroup/test" if levels else None,
        levels=levels,
        oom_kills=None,
        cpu_count=cpus,
        cpu_quota=quota,
    )


def plan(facts: MemoryFacts, budget: str | None = None, job: int | None = None, jobs: int | None = None):  # type: ignore[no-untyped-def]
    return plan_jobs(
        facts, budget=parse_memory_spec(budget) if budget else None, job_memory=job, requested_jobs=jobs
    )


def test_default_job_memory_reproduces_the_measured_gdn_sm90_peak() -> None:
    # The stock 0.6.6 GDN build on the H200 host (README): 18 concurrent cicc, peak RSS 103 GiB.
    assert abs(18 * DEFAULT_JOB_MEMORY - 103 * GIB) < GIB


def test_headroom_is_five_percent_with_a_one_gib_floor() -> None:
    assert headroom_for(8 * GIB) == MIN_HEADROOM
    assert MIN_HEADROOM == GIB
    assert headroom_for(120 * GIB) == 6 * GIB


def test_h200_host_is_cpu_bound() -> None:
    # 16 cores, ~120 GiB available: memory would allow floor((120 - 6) / 5.7) = 20 jobs, the CPUs 16.
    p = plan(machine(avail_gib=120, cpus=16))
    assert (p.jobs, p.memory_jobs, p.source) == (16, 20, "cpu")
    assert p.fits


def test_64_core_host_is_memory_bound() -> None:
    # FACTS: a 64-core host runs all 34 TUs at once (~195 GiB). With 120 GiB available: 20 jobs.
    p = plan(machine(avail_gib=120, cpus=64))
    assert (p.jobs, p.source) == (20, "memory")
    assert p.jobs * p.job_memory + p.headroom <= 120 * GIB
    assert "20 jobs" in p.reason


def test_cgroup_limit_binds_before_meminfo() -> None:
    # A 16 GiB container with 2 GiB used on a big host: 14 GiB left, 1 GiB headroom -> 2 jobs.
    p = plan(machine(avail_gib=120, cpus=16, limit_gib=16, used_gib=2))
    assert p.budget_bytes == 14 * GIB
    assert p.jobs == 2


def test_not_even_one_job_fits() -> None:
    p = plan(machine(avail_gib=120, cpus=16, limit_gib=6, used_gib=0))
    assert p.jobs == 0 and not p.fits
    assert "not even one job fits" in p.reason
    assert "5.7 GiB" in p.reason


def test_absolute_budget() -> None:
    p = plan(machine(avail_gib=120, cpus=64), budget="32G")
    # (32 - 1.6) / 5.7 = 5.3
    assert (p.budget_bytes, p.jobs) == (32 * GIB, 5)
    assert "budget 32.0 GiB" in p.reason


def test_fractional_budget() -> None:
    p = plan(machine(avail_gib=100, cpus=64), budget="50%")
    assert p.budget_bytes == 50 * GIB
    assert p.jobs == (50 * GIB - headroom_for(50 * GIB)) // DEFAULT_JOB_MEMORY


def test_learned_job_memory() -> None:
    p = plan(machine(avail_gib=24, cpus=16), job=2 * GIB)
    assert p.job_memory == 2 * GIB
    assert p.jobs == (24 * GIB - headroom_for(24 * GIB)) // (2 * GIB)


def test_requested_jobs_win_and_the_reason_warns() -> None:
    p = plan(machine(avail_gib=12, cpus=16), jobs=8)
    assert (p.jobs, p.source, p.memory_jobs) == (8, "requested", 1)
    assert "memory allows only 1" in p.reason
    quiet = plan(machine(avail_gib=120, cpus=16), jobs=4)
    assert quiet.reason == "4 jobs as requested"


def test_unknown_memory_falls_back_to_cpus() -> None:
    p = plan(machine(avail_gib=None, cpus=6, quota=3.5))
    assert (p.jobs, p.source, p.budget_bytes, p.memory_jobs) == (4, "unknown-memory", None, None)


def test_an_absolute_budget_works_without_memory_facts() -> None:
    p = plan(machine(avail_gib=None, cpus=8), budget="16G")
    assert (p.budget_bytes, p.jobs) == (16 * GIB, 2)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"jobs": 0}, "at least 1"),
        ({"jobs": -2}, "at least 1"),
        ({"job": 0}, "memory per job"),
        ({"budget": "0G"}, "memory budget must be positive"),
    ],
)
def test_bad_input_is_a_usage_error(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(UsageError, match=message):
        plan(machine(avail_gib=24, cpus=2), **kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize(("cpus", "jobs"), [(0, 2), (1, 2), (2, 3), (3, 5), (16, 18), (64, 66)])
def test_ninja_default_jobs(cpus: int, jobs: int) -> None:
    assert ninja_default_jobs(cpus) == jobs


def test_ninja_default_matches_the_real_ninja_here() -> None:
    ninja = shutil.which("ninja")
    if ninja is None:
        pytest.skip("ninja is not installed")
    out = subprocess.run([ninja, "--help"], capture_output=True, text=True, timeout=30)
    m = re.search(r"default=(\d+) on this system", out.stdout + out.stderr)
    assert m, out.stderr
    # ninja counts the CPUs it may use (affinity, and the cgroup quota from 1.12): our cpu_limit.
    assert ninja_default_jobs(memory.probe().cpu_limit) == int(m.group(1))


def test_this_machine_plan_is_consistent() -> None:
    facts = memory.probe()
    p = plan_jobs(facts, budget=None, job_memory=None, requested_jobs=None)
    assert 0 <= p.jobs <= facts.cpu_limit
    if p.budget_bytes is not None and p.jobs:
        assert p.jobs * p.job_memory + p.headroom <= p.budget_bytes


def test_absolute_budget_above_what_is_free_is_capped_at_available() -> None:
    p = plan(machine(avail_gib=8, cpus=64), budget="32G")
    assert p.budget_bytes == 8 * GIB
    assert p.jobs == 1  # (8 GiB - 1 GiB headroom) // 5.7 GiB
    assert "capped" in p.reason
