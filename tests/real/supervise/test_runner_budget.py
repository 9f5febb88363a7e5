"""The runner keeps a real build within its memory budget: one build alone, and 8 builds sharing the host."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import psutil
from ninja_projects import MIB, TreeSampler, max_overlap, write_project

from jitguard.config import MemorySpec, parse_size
from jitguard.facts.capacity import headroom_for
from jitguard.supervise.runner import BuildOptions, run_ninja
from live_processes import reaping as killing

JOB_MIB = 100  # what each stand-in allocates (its RSS is ~110 MiB with the interpreter)
JOB_MEMORY = 160 * MIB  # the per-job estimate given to the planner: what one job plus its launcher takes


def test_build_tree_stays_within_the_memory_budget_where_plain_ninja_does_not(
    tmp_path: Path, cache_dir: Path
) -> None:
    # Room for exactly one job after the planner's headroom: memory, not the 2 CPUs, decides the parallelism.
    budget = parse_size("1G") + 200 * MIB
    job_share = budget - headroom_for(budget)
    project = write_project(tmp_path / "supervised", jobs=4, mib=JOB_MIB, seconds=1)
    options = BuildOptions(
        memory_budget=MemorySpec(bytes=budget), job_memory=JOB_MEMORY, progress="none", cache_dir=cache_dir
    )

    with TreeSampler([psutil.Process().pid]) as sampler:
        result = run_ninja(project.root, project.manifest, module="standins", options=options)

    assert all(p.exists() for p in project.outputs)
    assert result.jobs == 1
    assert sampler.peak_bytes <= job_share, f"tree peaked at {sampler.peak_bytes / MIB:.0f} MiB"
    assert result.peak_rss_bytes <= job_share
    assert result.peak_rss_bytes > JOB_MIB * MIB  # the runner really measured the compile jobs

    # The same project under plain ninja (its default -j on this machine) does not fit: the test has teeth.
    control = write_project(tmp_path / "plain", jobs=4, mib=JOB_MIB, seconds=1)
    with TreeSampler([psutil.Process().pid]) as plain:
        subprocess.run(["ninja", "-C", str(control.root)], check=True, capture_output=True)
    assert plain.peak_bytes > job_share


def test_eight_processes_sharing_the_host_budget_stay_within_it_together(
    tmp_path: Path, cache_dir: Path
) -> None:
    # Each process alone may run 2 jobs; the 8 of them share the same 2 host-wide compile slots.
    budget = parse_size("1G") + 250 * MIB
    mib = 60
    projects = [
        write_project(tmp_path / f"engine{i}", jobs=2, mib=mib, seconds=1, journal=tmp_path / "journal.txt")
        for i in range(8)
    ]
    command = [sys.executable, "-m", "jitguard.cli", "build", "ninja", "--memory-budget", str(budget)]
    command += ["--job-memory", str(120 * MIB), "--progress", "none", "--json"]
    procs = [
        subprocess.Popen(
            [*command, str(p.manifest)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        for p in projects
    ]
    with killing([p.pid for p in procs]), TreeSampler([p.pid for p in procs]) as sampler:
        outputs = [p.communicate(timeout=240) for p in procs]

    for proc, (out, err) in zip(procs, outputs, strict=True):
        assert proc.returncode == 0, err
        assert json.loads(out)["jobs"] == 2
    assert all(o.exists() for p in projects for o in p.outputs)
    # Host-wide: never more than the 2 slots' worth of compile jobs at once, though 8 x 2 were allowed locally.
    assert max_overlap([tmp_path / "journal.txt"]) <= 2
    assert max_overlap([tmp_path / "journal.txt"]) >= 1
    # Everything the 8 builds ran (ninja, launchers waiting for a slot, the jobs) stayed within the budget;
    # 16 stand-ins at once would take ~1.1 GiB, plus the ninjas and launchers, over it.
    assert sampler.peak_bytes <= budget, f"8 builds peaked at {sampler.peak_bytes / MIB:.0f} MiB together"
