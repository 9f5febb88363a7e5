"""The file system of a path from the mount table: real lines of /proc/self/mountinfo and /proc/mounts (copied
from Linux hosts with NFS, Lustre, overlay and nested mounts), and this machine's own table."""

from __future__ import annotations

from pathlib import Path

import pytest

from jitguard.facts.filesystems import (
    filesystem_of,
    is_network,
    local_bases,
    mount_of,
    parse,
    probe,
    read_mount_table,
    triton_cache_dir,
)

# /proc/self/mountinfo of a container on an HPC node (format: ID PARENT MAJ:MIN ROOT POINT OPTS [OPTIONAL] - TYPE
# SOURCE SUPER-OPTS), trimmed of options that do not matter here.
MOUNTINFO = """\
1466 1387 0:312 / / rw,relatime master:590 - overlay overlay rw,lowerdir=/var/lib/docker/overlay2/l/A:/var/lib/docker/overlay2/l/B,upperdir=/var/lib/docker/overlay2/x/diff,workdir=/var/lib/docker/overlay2/x/work
1467 1466 0:315 / /proc rw,nosuid,nodev,noexec,relatime - proc proc rw
1470 1466 0:316 / /dev rw,nosuid - tmpfs tmpfs rw,size=65536k,mode=755
1480 1466 259:2 /home /home rw,relatime - ext4 /dev/nvme0n1p2 rw
1481 1480 0:52 / /home/alice/shared rw,relatime shared:120 - nfs4 fs01.cluster:/export/home/alice rw,vers=4.2,rsize=1048576,wsize=1048576,namlen=255,hard,proto=tcp,timeo=600,retrans=2,sec=sys,clientaddr=10.1.2.3,local_lock=none,addr=10.1.0.5
1482 1466 0:60 / /lustre/scratch rw,relatime - lustre 10.2.0.1@o2ib:/scratch rw,lazystatfs,noflock
1483 1482 259:3 / /lustre/scratch/local-ssd rw,relatime - xfs /dev/nvme1n1 rw,attr2,inode64
1484 1470 0:320 / /dev/shm rw,nosuid,nodev - tmpfs shm rw,size=65536k
1485 1466 0:321 / /mnt/my\\040data rw,relatime - fuse.sshfs alice@login:/data rw,user_id=1000,group_id=1000
1486 1466 0:322 / /tmp rw,nosuid,nodev - tmpfs tmpfs rw
1487 1486 0:323 / /tmp rw,relatime - nfs 10.0.0.9:/tmp rw,vers=3
"""

# /proc/mounts of a host (SOURCE POINT TYPE OPTIONS DUMP PASS).
PROC_MOUNTS = """\
/dev/sda1 / ext4 rw,relatime,errors=remount-ro 0 0
proc /proc proc rw,nosuid,nodev,noexec,relatime 0 0
storage:/vol/models /models nfs4 rw,relatime,vers=4.1,rsize=65536,wsize=65536,hard,proto=tcp 0 0
//fileserver/share /mnt/share cifs rw,relatime,vers=3.1.1,cache=strict,username=svc 0 0
gcs-bucket /mnt/gcs fuse.gcsfuse rw,nosuid,nodev,relatime,user_id=0,group_id=0 0 0
tmpfs /run tmpfs rw,nosuid,nodev,size=3274160k,mode=755 0 0
"""


@pytest.mark.parametrize(
    ("path", "point", "fs_type", "network"),
    [
        ("/home/alice/shared/.cache/jitguard", "/home/alice/shared", "nfs4", True),
        ("/home/alice/.cache/jitguard", "/home", "ext4", False),
        ("/lustre/scratch/alice/flashinfer", "/lustre/scratch", "lustre", True),
        ("/lustre/scratch/local-ssd/triton", "/lustre/scratch/local-ssd", "xfs", False),  # nested in lustre
        ("/opt/app", "/", "overlay", False),
        ("/dev/shm/jitguard-0", "/dev/shm", "tmpfs", False),
        ("/mnt/my data/cache", "/mnt/my data", "fuse.sshfs", True),  # \040 in the table is a space
        ("/tmp/jitguard-0", "/tmp", "nfs", True),  # mounted over the tmpfs at the same point: the last wins
        ("/home/alice/sharedfoo", "/home", "ext4", False),  # a prefix of the name is not a parent
    ],
)
def test_mountinfo_lines_give_the_mount_that_holds_a_path(
    path: str, point: str, fs_type: str, network: bool
) -> None:
    mount = mount_of(path, parse(MOUNTINFO))
    assert mount is not None
    assert (mount.mount_point, mount.fs_type, mount.network) == (point, fs_type, network)


def test_proc_mounts_lines_are_read_too() -> None:
    mounts = parse(PROC_MOUNTS)
    assert [m.fs_type for m in mounts] == ["ext4", "proc", "nfs4", "cifs", "fuse.gcsfuse", "tmpfs"]
    held = {p: mount_of(p, mounts) for p in ("/models/qwen", "/mnt/share/x", "/mnt/gcs/a", "/run/user/0")}
    assert {p: (m.fs_type, m.network) for p, m in held.items() if m} == {
        "/models/qwen": ("nfs4", True),
        "/mnt/share/x": ("cifs", True),
        "/mnt/gcs/a": ("fuse.gcsfuse", True),
        "/run/user/0": ("tmpfs", False),
    }
    assert mounts[2].source == "storage:/vol/models"


def test_network_types() -> None:
    for fs_type in ("nfs", "nfs4", "lustre", "cifs", "smb3", "glusterfs", "ceph", "gpfs", "beegfs", "9p"):
        assert is_network(fs_type), fs_type
    for fs_type in ("fuse.sshfs", "fuse.s3fs", "fuse.gcsfuse"):
        assert is_network(fs_type), fs_type
    for fs_type in ("ext4", "xfs", "btrfs", "overlay", "tmpfs", "zfs", "fuse.lxcfs"):
        assert not is_network(fs_type), fs_type


def test_a_path_not_created_yet_is_judged_where_it_would_be_created(tmp_path: Path) -> None:
    table = f"7 1 0:52 / {tmp_path}/nfs rw - nfs4 srv:/x rw\n1 0 8:1 / / rw - ext4 /dev/sda1 rw\n"
    (tmp_path / "nfs").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "nfs")
    mount = filesystem_of(tmp_path / "link" / "not" / "yet", table=table)
    assert mount is not None and mount.fs_type == "nfs4"  # through the link, to the mount behind it


def test_this_machines_table_is_read_and_covers_every_path() -> None:
    read = read_mount_table()
    assert read is not None and read[0] in ("/proc/self/mountinfo", "/proc/mounts")
    mounts = parse(read[1])
    assert any(m.mount_point == "/" for m in mounts)
    proc = filesystem_of("/proc/self")
    assert proc is not None and proc.fs_type == "proc" and not proc.network
    facts = probe({"cache_dir": "/proc/x", "triton_cache_dir": triton_cache_dir({"HOME": "/root"})})
    assert facts.table == read[0] and facts.error is None
    assert all(p.mount is not None for p in facts.paths)
    assert facts.lock_base is not None  # this machine's $TMPDIR, /tmp or /dev/shm is local


def test_local_bases_skip_network_and_missing_directories(tmp_path: Path) -> None:
    (tmp_path / "remote").mkdir()
    (tmp_path / "local").mkdir()
    table = f"2 1 0:9 / {tmp_path}/remote rw - lustre mds@tcp:/fs rw\n1 0 8:1 / / rw - ext4 /dev/sda1 rw\n"
    bases = [tmp_path / "remote", tmp_path / "missing", tmp_path / "local"]
    assert local_bases(bases, table=table) == (tmp_path / "local",)


def test_triton_cache_dir_follows_triton() -> None:
    assert triton_cache_dir({"TRITON_CACHE_DIR": "/x/t"}) == Path("/x/t")
    assert triton_cache_dir({"TRITON_HOME": "/h", "HOME": "/u"}) == Path("/h/.triton/cache")
    assert triton_cache_dir({"HOME": "/u"}) == Path("/u/.triton/cache")
