"""The store as a trust boundary (docs/fleet.md "Trust"), attacked as a second local user, a race or a limit
would: files another real user planted, links at a cache root and swapped in mid-save, named pipes, a small
``ulimit -n``, a killed restore's temporaries, wiped caches, a full disk, impossible manifests, and secrets in
every output of every store command."""

from __future__ import annotations

import contextlib
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from fault_makers import (
    FOREIGN_UID,
    assert_no_traceback,
    fill_disk,
    host_env,
    jitguard,
    need_root,
    on_tmpfs,
    tiny_project,
)
from jitguard import fileio
from jitguard.facts.jit_caches import CacheLayer
from jitguard.fleet.artifact_store import ArtifactStore
from jitguard.fleet.snapshot import MAX_MANIFEST_BYTES, StackKey
from jitguard.fleet.warm_transfer import fetch_manifest, manifest_name, restore, save

pytest.importorskip(
    "fsspec", reason="the artifact store needs fsspec (pip install fsspec: the 'share' extra)"
)

ARCH = "9.0"
STACK = StackKey({"python": "cpython-311", "torch": "2.11.0"}, "sm_90")
SECRET = b"-----BEGIN OPENSSH PRIVATE KEY----- root's own\n"


def as_other_user(script: str) -> None:
    """Run the shell ``script`` as uid 65534 (``nobody``), a real process without root's powers."""
    need_root()
    if shutil.which("setpriv") is None:
        pytest.skip("needs setpriv to run a process as another user")
    subprocess.run(
        [
            "setpriv",
            f"--reuid={FOREIGN_UID}",
            f"--regid={FOREIGN_UID}",
            "--clear-groups",
            "sh",
            "-ec",
            script,
        ],
        check=True,
        timeout=60,
        env={"PATH": os.environ["PATH"]},
    )


@pytest.fixture
def shared_tmp() -> Iterator[Path]:
    """A directory every user may create names in, sticky like /tmp (the place Inductor's default lives)."""
    path = Path(tempfile.mkdtemp(prefix="jitguard-shared-", dir="/tmp"))
    path.chmod(0o1777)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def store_blobs(store: Path) -> list[bytes]:
    blobs = store / "v1" / "blobs"
    return [p.read_bytes() for p in blobs.iterdir()] if blobs.is_dir() else []


def write(root: Path, relative: str, data: bytes, mode: int = 0o644) -> Path:
    path = root / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    path.chmod(mode)
    return path


# -- a host publishes only what is its own ----------------------------------------------------------------


def test_an_inductor_cache_another_user_created_first_is_left_out_of_the_save(
    tmp_path: Path, shared_tmp: Path
) -> None:
    planted = shared_tmp / "torchinductor_root"
    as_other_user(
        f"mkdir -p {planted}/fxgraph/ab && echo 'import os; os.system(\"id\")' > {planted}/fxgraph/ab/x.py"
    )
    root, store = tmp_path / "host", tmp_path / "store"
    store.mkdir()
    write(root, "vllm/torch_compile_cache/h/a.py", b"ours = 1\n")
    env = host_env(root, store, TORCHINDUCTOR_CACHE_DIR=str(planted))
    proc = jitguard(["warm", "save", "--arch", ARCH, "--json"], env)
    assert_no_traceback(proc)
    assert proc.returncode == 0, proc.stderr
    saved = json.loads(proc.stdout)["saved"]
    assert saved["files"] == 1
    reason = f"cache root not trusted (owned by another user (uid {FOREIGN_UID}))"
    assert saved["left_out"] == {reason: 1}
    assert saved["left_out_examples"][reason] == [f"inductor: {planted}"]
    assert not any(b"os.system" in blob for blob in store_blobs(store))


def test_a_link_another_user_planted_at_a_cache_root_is_never_followed(
    tmp_path: Path, shared_tmp: Path
) -> None:
    private = tmp_path / "root-only"
    write(private, "id_ed25519", SECRET, 0o600)
    private.chmod(0o700)
    planted = shared_tmp / "torchinductor_root"
    as_other_user(f"ln -s {private} {planted}")
    root, store = tmp_path / "host", tmp_path / "store"
    store.mkdir()
    write(root, "vllm/a.py", b"ours = 1\n")
    proc = jitguard(
        ["warm", "save", "--arch", ARCH, "--json"],
        host_env(root, store, TORCHINDUCTOR_CACHE_DIR=str(planted)),
    )
    assert proc.returncode == 0, proc.stderr
    left_out = json.loads(proc.stdout)["saved"]["left_out"]
    assert left_out == {
        f"cache root not trusted ({planted} is a link owned by another user (uid {FOREIGN_UID}))": 1
    }
    assert SECRET not in store_blobs(store)


def test_a_link_of_ones_own_at_a_cache_root_is_followed(tmp_path: Path) -> None:
    # ~/.cache on another disk, linked by its owner: the user's choice, and saved.
    target = tmp_path / "big-disk" / "vllm"
    write(target, "torch_compile_cache/a.py", b"ours = 1\n")
    root = tmp_path / "host"
    root.mkdir()
    (root / "vllm").symlink_to(target)
    result = save(
        ArtifactStore(f"file://{tmp_path / 'store'}"),
        STACK,
        "default",
        (CacheLayer("vllm", root / "vllm", None),),
    )
    assert [f.path for f in result.snapshot.files] == ["torch_compile_cache/a.py"]


@pytest.mark.parametrize(
    ("mode", "why"),
    [(0o666, "writable by every user (o+w)"), (0o664, "writable by group 0 (g+w)")],
    ids=["world-writable", "group-writable"],
)
def test_a_file_or_directory_others_can_write_is_left_out(tmp_path: Path, mode: int, why: str) -> None:
    root = tmp_path / "host"
    write(root, "vllm/ok.py", b"ok\n")
    write(root, "vllm/shared.py", b"anyone could have written this\n", mode)
    (root / "vllm" / "open").mkdir()
    (root / "vllm" / "open").chmod(0o777)
    write(root, "vllm/open/inside.py", b"x\n")
    if mode == 0o664 and os.getegid() == 0:
        pytest.skip(
            "group 0 is our own primary group here: its write bit is ours (the user private group rule)"
        )
    result = save(
        ArtifactStore(f"file://{tmp_path / 'store'}"),
        STACK,
        "default",
        (CacheLayer("vllm", root / "vllm", None),),
    )
    assert [f.path for f in result.snapshot.files] == ["ok.py"]
    assert result.left_out.counts == {why: 1, "in a directory writable by every user (o+w)": 1}


def test_a_symlink_swapped_in_mid_save_never_uploads_its_target(tmp_path: Path) -> None:
    secret = write(tmp_path / "private", "shadow", SECRET, 0o600)
    root = tmp_path / "host"
    victim = write(root, "vllm/graph.py", b"x = 1\n" * 1000)
    for i in range(40):
        write(root, f"vllm/other/{i}.py", b"y\n" * i)
    store = ArtifactStore(f"file://{tmp_path / 'store'}", timeout=120)
    layers = (CacheLayer("vllm", root / "vllm", None),)
    stop = threading.Event()

    def swap() -> None:
        link = victim.with_name(".swap")
        while not stop.is_set():
            with contextlib.suppress(OSError):
                link.unlink()
                link.symlink_to(secret)
                os.replace(link, victim)  # the name is now a link to the secret
                write(root, "vllm/.regular", b"x = 1\n" * 1000)
                os.replace(root / "vllm" / ".regular", victim)  # and a regular file again

    swapper = threading.Thread(target=swap, daemon=True)
    swapper.start()
    try:
        for _ in range(30):
            save(store, STACK, "default", layers)
    finally:
        stop.set()
        swapper.join()
    blobs = tmp_path / "store" / "v1" / "blobs"
    for blob in blobs.iterdir():
        assert SECRET not in blob.read_bytes()
        assert fileio.sha256_regular(blob) == blob.name  # every blob holds exactly what was hashed


def test_modes_travel_a_private_file_stays_private(tmp_path: Path) -> None:
    first = tmp_path / "a"
    write(first, "vllm/private.py", b"p\n", 0o600)
    write(first, "vllm/tool.sh", b"#!/bin/sh\n", 0o755)
    write(first, "vllm/plain.py", b"q\n", 0o644)
    store = ArtifactStore(f"file://{tmp_path / 'store'}")
    save(store, STACK, "default", (CacheLayer("vllm", first / "vllm", None),))
    found = fetch_manifest(store, STACK, "default")
    assert found is not None
    second = tmp_path / "b"
    restore(store, found[0], (CacheLayer("vllm", second / "vllm", None),))
    modes = {p.name: p.stat().st_mode & 0o7777 for p in (second / "vllm").iterdir()}
    assert modes == {"private.py": 0o600, "tool.sh": 0o755, "plain.py": 0o644}


def test_a_named_pipe_in_a_cache_never_hangs_the_save(tmp_path: Path) -> None:
    root, store = tmp_path / "host", tmp_path / "store"
    store.mkdir()
    write(root, "vllm/a.py", b"a\n")
    os.mkfifo(root / "vllm" / "b.py")  # no writer: a blocking open would hang forever
    proc = jitguard(["warm", "save", "--arch", ARCH, "--json"], host_env(root, store), timeout=120)
    assert proc.returncode == 0, proc.stderr
    saved = json.loads(proc.stdout)["saved"]
    assert saved["files"] == 1 and saved["left_out"] == {"not a regular file": 1}


def test_a_save_of_nothing_is_an_error_that_says_why(tmp_path: Path, shared_tmp: Path) -> None:
    planted = shared_tmp / "vllm"
    as_other_user(f"mkdir -p {planted} && echo x > {planted}/a.py")
    store = tmp_path / "store"
    store.mkdir()
    proc = jitguard(
        ["warm", "save", "--arch", ARCH, "--layers", "vllm"],
        host_env(tmp_path / "host", store, VLLM_CACHE_ROOT=str(planted)),
    )
    assert_no_traceback(proc)
    assert proc.returncode == 1
    assert "no file here may be published: left out 1 cache root not trusted" in proc.stdout


# -- bounded in every resource ----------------------------------------------------------------------------


def _limit_descriptors() -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (256, 256))


def test_a_5000_file_snapshot_saves_and_restores_under_ulimit_n_256(tmp_path: Path) -> None:
    first, store = tmp_path / "a", tmp_path / "store"
    store.mkdir()
    for i in range(5000):
        write(first, f"triton/{i % 100:03d}/k{i}.json", f'{{"k": {i}}}'.encode())
    args = [sys.executable, "-m", "jitguard", "warm"]
    for action, env in (("save", host_env(first, store)), ("restore", host_env(tmp_path / "b", store))):
        proc = subprocess.run(
            [*args, action, "--arch", ARCH, "--json", "--layers", "triton"],
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
            preexec_fn=_limit_descriptors,
        )
        assert_no_traceback(proc)
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert json.loads(proc.stdout)["restored"]["landed"] == 5000
    assert len(list((tmp_path / "b" / "triton").rglob("*.json"))) == 5000


def test_a_manifest_over_the_documented_size_is_refused_before_it_is_parsed(tmp_path: Path) -> None:
    store = ArtifactStore(f"file://{tmp_path / 'store'}")
    document = tmp_path / "store" / "v1" / manifest_name(STACK, "default")
    document.parent.mkdir(parents=True)
    with open(document, "wb") as out:
        out.truncate(MAX_MANIFEST_BYTES + 1)  # sparse: the size alone refuses it
    from jitguard.fleet.warm_transfer import WarmUnavailable

    with pytest.raises(WarmUnavailable, match=f"more than it can be \\({MAX_MANIFEST_BYTES}\\)"):
        fetch_manifest(store, STACK, "default")


def test_the_temporaries_of_a_killed_restore_are_swept_by_the_next(tmp_path: Path) -> None:
    first, store = tmp_path / "a", tmp_path / "store"
    write(first, "vllm/h/a.py", b"a\n")
    write(first, "vllm/h/b.py", b"b\n")
    remote = ArtifactStore(f"file://{store}")
    save(remote, STACK, "default", (CacheLayer("vllm", first / "vllm", None),))
    dead = subprocess.Popen(["true"])
    dead.wait()  # a real process, gone: its pid names the restorer that was killed
    second = tmp_path / "b"
    left = write(second, f"vllm/h/.a.py.{dead.pid}-0badc0de.fetch", b"half")
    alive = write(second, f"vllm/h/.b.py.{os.getppid()}-0badc0de.fetch", b"a restorer still at work")
    found = fetch_manifest(remote, STACK, "default")
    assert found is not None
    result = restore(remote, found[0], (CacheLayer("vllm", second / "vllm", None),))
    assert result.swept == 1 and result.landed == 2
    assert not left.exists() and alive.exists()


# -- outcomes that tell the truth -------------------------------------------------------------------------


def test_wiped_caches_are_restored_again_not_taken_for_present(tmp_path: Path) -> None:
    first, store = tmp_path / "a", tmp_path / "store"
    store.mkdir()
    write(first, "vllm/h/a.py", b"a\n")
    assert jitguard(["warm", "save", "--arch", ARCH], host_env(first, store)).returncode == 0
    env = host_env(tmp_path / "b", store)
    outcomes = []
    for wipe in (False, False, True):
        if wipe:
            shutil.rmtree(tmp_path / "b" / "vllm")
        proc = jitguard(["warm", "restore", "--arch", ARCH, "--json"], env)
        assert proc.returncode == 0, proc.stderr
        outcomes.append(json.loads(proc.stdout)["outcome"])
    assert outcomes == ["restored", "present", "restored"]
    assert (tmp_path / "b" / "vllm" / "h" / "a.py").read_bytes() == b"a\n"


def test_a_full_disk_keeps_each_layer_whole_or_absent(tmp_path: Path) -> None:
    first, store = tmp_path / "a", tmp_path / "store"
    store.mkdir()
    write(first, "vllm/h/a.py", b"a\n")
    for i in range(8):
        write(first, f"triton/K{i}/k.cubin", os.urandom(256 * 1024))
    assert jitguard(["warm", "save", "--arch", ARCH], host_env(first, store)).returncode == 0
    second = tmp_path / "b"
    triton = second / "triton"
    proc = on_tmpfs(
        triton,
        [sys.executable, "-m", "jitguard", "warm", "restore", "--arch", ARCH, "--json"],
        host_env(second, store),
        size="1m",
        prepare=f"( {fill_disk(triton)} ) ; rm -f {triton}/filler; head -c 700k /dev/zero > {triton}/filler",
    )
    assert_no_traceback(proc)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    envelope = json.loads(proc.stdout)
    assert envelope["outcome"] == "partial"
    assert list(envelope["restored"]["absent_layers"]) == ["triton"]
    assert (second / "vllm" / "h" / "a.py").is_file()  # the other layer is whole
    assert "rolled back" in envelope["detail"]


def test_a_manifest_with_an_impossible_time_is_refused_then_replaced(tmp_path: Path) -> None:
    first, store = tmp_path / "a", tmp_path / "store"
    store.mkdir()
    write(first, "vllm/h/a.py", b"a\n")
    env = host_env(first, store)
    assert jitguard(["warm", "save", "--arch", ARCH], env).returncode == 0
    document = next((store / "v1" / "warm").rglob("*.json"))
    data = json.loads(document.read_text())
    document.write_text(json.dumps(data).replace(f'"created": {data["created"]}', '"created": 1' + "0" * 400))
    for action in ("show", "restore"):
        proc = jitguard(["warm", action, "--arch", ARCH], host_env(tmp_path / "b", store))
        assert_no_traceback(proc)
        assert proc.returncode == 1 and "impossible creation time" in proc.stdout, proc.stdout + proc.stderr
    assert jitguard(["warm", "save", "--arch", ARCH], env).returncode == 0  # the damaged manifest is replaced
    assert jitguard(["warm", "show", "--arch", ARCH], env).returncode == 0


# -- one redaction for every output -----------------------------------------------------------------------


def test_a_planted_secret_reaches_no_output_of_any_store_command(tmp_path: Path) -> None:
    secret_key = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
    password = "pa/ss:w@rd-9f8e"
    url = f"s3://AKIAIOSFODNN7EXAMPLE:{password}@fleet-bucket/prefix?X-Amz-Signature=deadbeefcafe1234"
    root = tmp_path / "host"
    write(root, "vllm/a.py", b"a\n")
    env = host_env(
        root,
        tmp_path / "store",
        JITGUARD_SHARE=url,
        AWS_SECRET_ACCESS_KEY=secret_key,
        AWS_ACCESS_KEY_ID="AKIAIOSFODNN7EXAMPLE",
        AWS_ENDPOINT_URL="http://127.0.0.1:9",  # nothing listens there: the client's own error text
        JITGUARD_SHARE_TIMEOUT="20",
    )
    outputs = []
    for action in ("save", "restore", "show"):
        for extra in ([], ["--json"]):
            proc = jitguard(["warm", action, "--arch", ARCH, *extra], env, timeout=120)
            assert_no_traceback(proc)
            outputs.append(proc.stdout + proc.stderr)
    proc = jitguard(["doctor", "--json"], env, timeout=300)
    outputs.append(proc.stdout + proc.stderr)
    project = tiny_project(tmp_path / "project")
    for extra in ([], ["--json"]):
        proc = jitguard(["build", "ninja", str(project), "--publish", url, *extra], env, timeout=300)
        assert_no_traceback(proc)
        outputs.append(proc.stdout + proc.stderr)
    for text in outputs:
        for secret in (secret_key, password, "deadbeefcafe1234", "AKIAIOSFODNN7EXAMPLE", "ss:w@rd"):
            assert secret not in text, text
    assert any("<redacted>@fleet-bucket" in text for text in outputs)


def test_names_that_end_in_a_newline_or_climb_are_not_names() -> None:
    for bad in ("a\n", "a/b\n", "..", "-rf", "a\x00", "a/../b", ""):
        assert not fileio.is_safe_relative(bad), repr(bad)
    assert not fileio.is_sha256("0" * 64 + "\n")
    assert fileio.is_plain_name("__grp__k.json") and fileio.is_sha256("0" * 64)


def test_doctor_names_the_cache_a_save_would_leave_out_and_the_fix(tmp_path: Path, shared_tmp: Path) -> None:
    planted = shared_tmp / "torchinductor_root"
    as_other_user(f"mkdir -p {planted}")
    store = tmp_path / "store"
    store.mkdir()
    env = host_env(tmp_path / "host", store, TORCHINDUCTOR_CACHE_DIR=str(planted))
    proc = jitguard(["doctor", "--json", "--backend", "torch"], env)
    assert_no_traceback(proc)
    from envelope_schemas import assert_valid

    envelope = json.loads(proc.stdout)
    assert_valid(envelope)
    (finding,) = [f for f in envelope["store"]["findings"] if f["code"] == "warm-cache-untrusted"]
    assert finding["code"] == "warm-cache-untrusted" and str(planted) in finding["title"]
    assert {
        "text": "Give the inductor cache a directory of your own:",
        "command": "export TORCHINDUCTOR_CACHE_DIR=~/.cache/torchinductor",
    } in finding["fixes"]
    text = jitguard(["doctor", "--backend", "torch"], env).stdout
    assert "warm-cache-untrusted" in text and "export TORCHINDUCTOR_CACHE_DIR=~/.cache/torchinductor" in text
