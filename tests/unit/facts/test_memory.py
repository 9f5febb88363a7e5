"""Memory facts: cgroup v2 and v1 on fixture trees, then this machine's real cgroup (and a real child cgroup
with a limit, where we may create one)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from jitguard.facts import memory

GIB = 1024**3
MEMINFO = "MemTotal:       {total} kB\nMemFree:        1000 kB\nMemAvailable:   {avail} kB\nBuffers: 10 kB\n"


def write_tree(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def make_proc(
    tmp_path: Path, *, cgroup: str, mountinfo: str = "", total_gib: int = 64, avail_gib: int = 60
) -> Path:
    proc = tmp_path / "proc"
    write_tree(
        proc,
        {
            "meminfo": MEMINFO.format(total=total_gib * 1024 * 1024, avail=avail_gib * 1024 * 1024),
            "self/cgroup": cgroup,
            "self/mountinfo": mountinfo,
        },
    )
    return proc


# --- cgroup v2


def test_v2_nested_cgroup_takes_the_tightest_level_and_subtracts_inactive_file(tmp_path: Path) -> None:
    cg = tmp_path / "cg"
    write_tree(
        cg,
        {
            "cgroup.controllers": "cpu memory pids\n",
            # parent: 6 GiB limit, 5 GiB used of which 2 GiB inactive cache -> 3 GiB left
            "kubepods/memory.max": str(6 * GIB),
            "kubepods/memory.current": str(5 * GIB),
            "kubepods/memory.stat": f"anon 1\ninactive_file {2 * GIB}\nactive_file 5\n",
            # leaf: 8 GiB limit, 1 GiB used -> 7 GiB left at this level, but the parent binds
            "kubepods/pod1/memory.max": str(8 * GIB),
            "kubepods/pod1/memory.current": str(1 * GIB),
            "kubepods/pod1/memory.stat": "inactive_file 0\n",
            "kubepods/pod1/memory.events": "low 0\nhigh 0\nmax 4\noom 2\noom_kill 3\n",
            "kubepods/pod1/cpu.max": "150000 100000\n",
        },
    )
    proc = make_proc(tmp_path, cgroup="0::/kubepods/pod1\n")
    facts = memory.probe(cgroup_root=cg, proc_root=proc)

    assert facts.cgroup_version == "v2"
    assert facts.cgroup_path == str(cg / "kubepods" / "pod1")
    assert [lv.path for lv in facts.levels] == [str(cg / "kubepods/pod1"), str(cg / "kubepods"), str(cg)]
    assert facts.cgroup_limit == 6 * GIB
    assert facts.binding_level is not None and facts.binding_level.path == str(cg / "kubepods")
    assert facts.cgroup_available == 3 * GIB
    assert facts.available == 3 * GIB
    assert facts.limited_by == "cgroup"
    assert facts.oom_kills == 3
    assert facts.cpu_quota == 1.5


def test_v2_max_means_unlimited_and_meminfo_decides(tmp_path: Path) -> None:
    cg = tmp_path / "cg"
    write_tree(
        cg,
        {
            "cgroup.controllers": "memory\n",
            "app/memory.max": "max\n",
            "app/memory.current": str(GIB),
            "app/cpu.max": "max 100000\n",
        },
    )
    facts = memory.probe(cgroup_root=cg, proc_root=make_proc(tmp_path, cgroup="0::/app\n", avail_gib=20))
    assert facts.cgroup_limit is None
    assert facts.cgroup_available is None
    assert facts.available == 20 * GIB
    assert facts.limited_by == "meminfo"
    assert facts.cpu_quota is None
    assert facts.cpu_limit == max(1, len(os.sched_getaffinity(0)))


def test_cpu_quota_rounds_up_and_never_exceeds_affinity(tmp_path: Path) -> None:
    cg = tmp_path / "cg"
    write_tree(cg, {"cgroup.controllers": "cpu\n", "a/cpu.max": "50000 100000\n", "a/memory.max": "max"})
    facts = memory.probe(cgroup_root=cg, proc_root=make_proc(tmp_path, cgroup="0::/a\n"))
    assert facts.cpu_quota == 0.5
    assert facts.cpu_limit == 1
    big = memory.MemoryFacts(None, None, None, None, (), None, cpu_count=2, cpu_quota=64.0)
    assert big.cpu_limit == 2


def test_v2_cgroup_namespace_path_is_mapped_through_mountinfo(tmp_path: Path) -> None:
    # Inside a container without a cgroup namespace: /proc/self/cgroup names the host path, and the mount's
    # root is that same cgroup, so the leaf is the mount point itself.
    cg = tmp_path / "cg"
    write_tree(cg, {"cgroup.controllers": "memory\n", "memory.max": str(4 * GIB), "memory.current": str(GIB)})
    mountinfo = f"30 25 0:26 /docker/abc123 {cg} rw,nosuid - cgroup2 cgroup2 rw\n"
    proc = make_proc(tmp_path, cgroup="0::/docker/abc123\n", mountinfo=mountinfo)
    facts = memory.probe(cgroup_root=cg, proc_root=proc)
    assert facts.cgroup_path == str(cg)
    assert facts.cgroup_available == 3 * GIB
    assert facts.notes == ()


def test_unknown_cgroup_path_falls_back_to_the_root_with_a_note(tmp_path: Path) -> None:
    cg = tmp_path / "cg"
    write_tree(cg, {"cgroup.controllers": "memory\n", "memory.max": str(2 * GIB), "memory.current": "0"})
    facts = memory.probe(cgroup_root=cg, proc_root=make_proc(tmp_path, cgroup="0::/gone/elsewhere\n"))
    assert facts.cgroup_path == str(cg)
    assert facts.cgroup_limit == 2 * GIB
    assert any("not found" in n for n in facts.notes)


# --- cgroup v1


def v1_tree(cg: Path, leaf: str, *, limit: int, usage: int, inactive: int) -> None:
    write_tree(
        cg,
        {
            "memory/memory.limit_in_bytes": "9223372036854771712\n",
            "memory/memory.usage_in_bytes": str(40 * GIB),
            "memory/memory.stat": f"inactive_file 1\ntotal_inactive_file {10 * GIB}\n",
            f"memory/{leaf}/memory.limit_in_bytes": str(limit),
            f"memory/{leaf}/memory.usage_in_bytes": str(usage),
            f"memory/{leaf}/memory.stat": f"cache 5\ninactive_file 7\ntotal_inactive_file {inactive}\n",
            f"memory/{leaf}/memory.oom_control": "oom_kill_disable 0\nunder_oom 0\noom_kill 1\n",
            "cpu,cpuacct/cpu.cfs_quota_us": "-1\n",
            "cpu,cpuacct/cpu.cfs_period_us": "100000\n",
            f"cpu,cpuacct/{leaf}/cpu.cfs_quota_us": "200000\n",
            f"cpu,cpuacct/{leaf}/cpu.cfs_period_us": "100000\n",
        },
    )


V1_SELF_CGROUP = "12:pids:/\n4:memory:/docker/abc\n3:cpu,cpuacct:/docker/abc\n1:name=systemd:/\n"


def test_v1_limit_minus_working_set(tmp_path: Path) -> None:
    cg = tmp_path / "cg"
    v1_tree(cg, "docker/abc", limit=4 * GIB, usage=3 * GIB, inactive=GIB)
    facts = memory.probe(cgroup_root=cg, proc_root=make_proc(tmp_path, cgroup=V1_SELF_CGROUP))

    assert facts.cgroup_version == "v1"
    assert facts.cgroup_path == str(cg / "memory/docker/abc")
    leaf = facts.levels[0]
    # usage 3 GiB includes 1 GiB of inactive page cache (total_inactive_file): working set 2 GiB, 2 GiB left
    assert (leaf.limit, leaf.working_set, leaf.available) == (4 * GIB, 2 * GIB, 2 * GIB)
    assert facts.levels[-1].limit is None  # the root's 0x7FFFFFFFFFFFF000 is "no limit"
    assert facts.available == 2 * GIB
    assert facts.oom_kills == 1
    assert facts.cpu_quota == 2.0
    assert facts.cpu_limit == min(2, len(os.sched_getaffinity(0)))


def test_v1_huge_limit_is_unlimited(tmp_path: Path) -> None:
    cg = tmp_path / "cg"
    v1_tree(cg, "docker/abc", limit=9223372036854771712, usage=GIB, inactive=0)
    facts = memory.probe(cgroup_root=cg, proc_root=make_proc(tmp_path, cgroup=V1_SELF_CGROUP, avail_gib=30))
    assert facts.cgroup_limit is None
    assert facts.available == 30 * GIB
    assert facts.limited_by == "meminfo"


def test_v1_container_view_strips_the_mount_root(tmp_path: Path) -> None:
    # A container sees its own cgroup at the mount point; /proc/self/cgroup still names the host path.
    cg = tmp_path / "cg"
    write_tree(
        cg,
        {
            "memory/memory.limit_in_bytes": str(8 * GIB),
            "memory/memory.usage_in_bytes": str(GIB),
            "memory/memory.stat": "total_inactive_file 0\n",
        },
    )
    mountinfo = f"35 31 0:32 /docker/abc {cg}/memory rw,relatime - cgroup cgroup rw,memory\n"
    proc = make_proc(tmp_path, cgroup="4:memory:/docker/abc\n", mountinfo=mountinfo)
    facts = memory.probe(cgroup_root=cg, proc_root=proc)
    assert facts.cgroup_path == str(cg / "memory")
    assert facts.cgroup_available == 7 * GIB
    assert facts.notes == ()


def test_no_cgroup_and_no_meminfo_are_facts_not_errors(tmp_path: Path) -> None:
    facts = memory.probe(cgroup_root=tmp_path / "none", proc_root=tmp_path / "noproc")
    assert facts.cgroup_version is None
    assert facts.available is None
    assert facts.limited_by is None
    assert facts.cpu_limit >= 1
    assert any("meminfo" in n for n in facts.notes)
    assert any("no memory cgroup" in n for n in facts.notes)


def test_evidence_names_the_binding_cgroup(tmp_path: Path) -> None:
    cg = tmp_path / "cg"
    v1_tree(cg, "docker/abc", limit=4 * GIB, usage=3 * GIB, inactive=GIB)
    facts = memory.probe(cgroup_root=cg, proc_root=make_proc(tmp_path, cgroup=V1_SELF_CGROUP))
    text = "\n".join(facts.evidence())
    assert "MemAvailable 60.0 GiB" in text
    assert f"cgroup v1 {cg / 'memory/docker/abc'}: limit 4.0 GiB" in text


# --- this machine


def meminfo_kib(name: str) -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith(name + ":"):
            return int(line.split()[1])
    raise AssertionError(name)


def test_this_machine() -> None:
    facts = memory.probe()
    assert facts.mem_total == meminfo_kib("MemTotal") * 1024
    assert facts.cpu_count == len(os.sched_getaffinity(0))
    assert facts.available is not None and 0 < facts.available <= facts.mem_total
    if facts.cgroup_version is not None:
        assert facts.cgroup_path is not None and Path(facts.cgroup_path).is_dir()
        assert facts.levels and facts.levels[0].usage is not None
        # The leaf is this process's cgroup: it lists our pid (v1 memory controller or v2 unified).
        assert str(os.getpid()) in Path(facts.cgroup_path, "cgroup.procs").read_text().split()


def _v1_memory_leaf() -> Path | None:
    facts = memory.probe()
    if facts.cgroup_version != "v1" or facts.cgroup_path is None:
        return None
    return Path(facts.cgroup_path)


PROBE_IN_CHILD = """
import json, sys
from jitguard.facts import memory
f = memory.probe()
lv = f.binding_level
print(json.dumps({"path": f.cgroup_path, "limit": f.cgroup_limit, "available": f.available,
                  "limited_by": f.limited_by, "binding": lv.path if lv else None}))
"""


def test_real_child_cgroup_v1_limit_is_seen_by_a_process_inside_it() -> None:
    leaf = _v1_memory_leaf()
    if leaf is None:
        pytest.skip("needs a cgroup v1 memory controller (this machine has cgroup v2 or none)")
    child = leaf / f"jitguard-test-{uuid.uuid4().hex[:8]}"
    try:
        child.mkdir()
        (child / "memory.limit_in_bytes").write_text(str(256 * 1024**2))
    except OSError as exc:
        pytest.skip(f"cannot create a limited child memory cgroup here: {exc}")
    try:
        # The child shell moves itself into the cgroup, then becomes the probing Python process.
        proc = subprocess.run(
            [
                "sh",
                "-c",
                f'echo $$ > "{child}/cgroup.procs" && exec "$0" -c "$1"',
                sys.executable,
                PROBE_IN_CHILD,
            ],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert proc.returncode == 0, proc.stderr
        seen = json.loads(proc.stdout)
    finally:
        child.rmdir()
    assert seen["path"] == str(child)
    assert seen["limit"] == 256 * 1024**2
    assert seen["binding"] == str(child)
    assert seen["limited_by"] == "cgroup"
    assert 0 < seen["available"] <= 256 * 1024**2
