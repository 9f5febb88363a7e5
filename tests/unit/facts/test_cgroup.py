"""The cgroup file formats both the memory facts and the OOM watch read, on fixture files."""

from __future__ import annotations

from pathlib import Path

from jitguard.facts import cgroup

MOUNTINFO = """\
25 30 0:22 / /sys/fs/cgroup rw,nosuid - tmpfs tmpfs ro,mode=755
31 25 0:27 /docker/abc /sys/fs/cgroup/memory rw,nosuid - cgroup cgroup rw,memory
32 25 0:28 / /sys/fs/cgroup/cpu,cpuacct rw,nosuid - cgroup cgroup rw,cpu,cpuacct
40 25 0:35 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw
41 30 0:40 / /proc rw - proc proc rw
"""


def test_mounts_are_every_cgroup_hierarchy_with_its_root_and_controllers(tmp_path: Path) -> None:
    (tmp_path / "mountinfo").write_text(MOUNTINFO)
    found = cgroup.mounts(tmp_path / "mountinfo")
    assert [(str(m.point), m.root, m.version) for m in found] == [
        ("/sys/fs/cgroup/memory", "/docker/abc", "v1"),
        ("/sys/fs/cgroup/cpu,cpuacct", "/", "v1"),
        ("/sys/fs/cgroup/unified", "/", "v2"),
    ]
    assert "memory" in found[0].controllers and not found[2].controllers


def test_a_cgroup_path_maps_under_a_mount_whose_root_is_the_container() -> None:
    mount = cgroup.CgroupMount(Path("/sys/fs/cgroup/memory"), "/docker/abc", "v1", frozenset({"memory"}))
    assert mount.directory("/docker/abc/job") == Path("/sys/fs/cgroup/memory/job")
    assert mount.directory("/docker/abcdef") == Path("/sys/fs/cgroup/memory/docker/abcdef")  # not inside


def test_memberships_and_keyed_files(tmp_path: Path) -> None:
    assert cgroup.memberships("12:memory:/a\n11:cpu,cpuacct:/b\n0::/c\nbroken\n") == {
        "memory": "/a",
        "cpu": "/b",
        "cpuacct": "/b",
        "": "/c",
    }
    (tmp_path / "memory.events").write_text("oom 2\noom_kill 1\nnot a pair here\n")
    assert cgroup.read_keyed(tmp_path / "memory.events") == {"oom": 2, "oom_kill": 1}
    assert cgroup.read_keyed(tmp_path / "missing") == {}
