"""Warm snapshots on real files through a real ``file://`` store: what is saved, what lands where on another
host, Triton's group files relocated, and every piece a restore must not trust refused."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from jitguard.facts.jit_caches import CacheLayer, layers
from jitguard.fileio import is_safe_relative
from jitguard.fleet.artifact_store import ArtifactStore
from jitguard.fleet.snapshot import SnapshotRejected, StackKey
from jitguard.fleet.warm_transfer import fetch_manifest, manifest_name, restore, save

pytest.importorskip(
    "fsspec", reason="the artifact store needs fsspec (pip install fsspec: the 'share' extra)"
)

STACK = StackKey({"python": "cpython-311", "torch": "2.11.0", "vllm": "0.26.0"}, "sm_90")


def host(root: Path) -> tuple[CacheLayer, ...]:
    return (
        CacheLayer("vllm", root / "vllm", "VLLM_CACHE_ROOT"),
        CacheLayer("triton", root / "triton", "TRITON_CACHE_DIR"),
        CacheLayer("inductor", root / "inductor", "TORCHINDUCTOR_CACHE_DIR"),
        CacheLayer("flashinfer", root / "flashinfer", "FLASHINFER_WORKSPACE_BASE"),
    )


def fill(root: Path) -> None:
    """Caches as an engine start leaves them (names and shapes of the real ones)."""
    files = {
        "vllm/torch_compile_cache/7c1f/rank_0_0/backbone/computation_graph.py": b"def f(x): return x\n",
        "vllm/torch_compile_cache/7c1f/rank_0_0/backbone/artifact_compile_range_1_8192_subgraph_0": b"\x00"
        * 64,
        "triton/QJ4T/fused_recurrent_fwd.cubin": b"\x7fELF cubin",
        "triton/QJ4T/fused_recurrent_fwd.json": b'{"name": "fused_recurrent_fwd"}',
        "triton/QJ4T/fused_recurrent_fwd.autotune.json": b'{"configs": []}',
        "inductor/fxgraph/ab/fab12/entry": b"graph",
        "flashinfer/0.6.14/90a/cutedsl/kernel.o": b"\x7fELF dsl",
        # an nvcc build tree: travels as a module (fleet.module_share), not here
        "flashinfer/0.6.14/90a/cached_ops/sampling/build.ninja": b"rule cc\n",
        "flashinfer/0.6.14/90a/cached_ops/sampling/sampling.so": b"\x7fELF so",
        "triton/QJ4T/.lock": b"",
        "triton/QJ4T/fused.cubin.tmp.pid_1_2": b"half",
    }
    for relative, data in files.items():
        (root / relative).parent.mkdir(parents=True, exist_ok=True)
        (root / relative).write_bytes(data)
    group = {
        "child_paths": {
            n: str(root / "triton" / "QJ4T" / n)
            for n in ("fused_recurrent_fwd.cubin", "fused_recurrent_fwd.json")
        }
    }
    (root / "triton" / "QJ4T" / "__grp__fused_recurrent_fwd.json").write_text(json.dumps(group))


def store_at(tmp_path: Path, timeout: float = 30.0) -> ArtifactStore:
    (tmp_path / "store").mkdir(exist_ok=True)
    return ArtifactStore(f"file://{tmp_path / 'store'}", timeout=timeout)


def saved(tmp_path: Path) -> tuple[ArtifactStore, Path]:
    first = tmp_path / "host-a"
    fill(first)
    store = store_at(tmp_path)
    save(store, STACK, "default", host(first))
    return store, first


def manifest_path(tmp_path: Path) -> Path:
    return tmp_path / "store" / "v1" / manifest_name(STACK, "default")


def files_under(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_a_new_host_gets_every_cache_file_where_its_engine_looks(tmp_path: Path) -> None:
    store, first = saved(tmp_path)
    second = tmp_path / "elsewhere" / "host-b"
    found = fetch_manifest(store, STACK, "default")
    assert found is not None
    result = restore(store, found[0], host(second))

    assert result.landed == 8 and result.present == 0 and result.refused == {}
    before, after = files_under(first), files_under(second)
    group = "triton/QJ4T/__grp__fused_recurrent_fwd.json"
    left_out = {
        "flashinfer/0.6.14/90a/cached_ops/sampling/build.ninja",
        "flashinfer/0.6.14/90a/cached_ops/sampling/sampling.so",
        "triton/QJ4T/.lock",
        "triton/QJ4T/fused.cubin.tmp.pid_1_2",
    }
    assert set(after) == set(before) - left_out
    assert all(after[name] == before[name] for name in after if name != group)
    children = json.loads(after[group])["child_paths"]
    assert children == {
        n: str(second / "triton" / "QJ4T" / n)
        for n in ("fused_recurrent_fwd.cubin", "fused_recurrent_fwd.json")
    }
    assert all(Path(p).is_file() for p in children.values())  # Triton finds the group's kernels here


def test_what_was_left_out_is_counted(tmp_path: Path) -> None:
    fill(tmp_path / "host-a")
    (tmp_path / "host-a" / "triton" / "link").symlink_to("/etc")
    result = save(store_at(tmp_path), STACK, "default", host(tmp_path / "host-a"))
    assert result.left_out.counts == {
        "nvcc build tree (shared as a module)": 1,
        "lock or temporary file": 2,
        "link": 1,
    }
    assert result.left_out.examples["link"] == ["triton/link"]


def test_a_second_restore_writes_nothing_and_local_files_are_kept(tmp_path: Path) -> None:
    store, _first = saved(tmp_path)
    second = tmp_path / "host-b"
    (second / "triton" / "QJ4T").mkdir(parents=True)
    (second / "triton" / "QJ4T" / "fused_recurrent_fwd.cubin").write_bytes(b"compiled here")
    snapshot = fetch_manifest(store, STACK, "default")[0]  # type: ignore[index]

    first_pass = restore(store, snapshot, host(second))
    again = restore(store, snapshot, host(second))

    assert first_pass.kept_local == 1 and first_pass.landed == 7
    assert (second / "triton" / "QJ4T" / "fused_recurrent_fwd.cubin").read_bytes() == b"compiled here"
    assert again.landed == 0 and again.fetched_bytes == 0 and again.present == 7 and again.kept_local == 1


def test_the_same_file_in_two_snapshots_is_stored_once(tmp_path: Path) -> None:
    store, first = saved(tmp_path)
    save(store, STACK, "other-model", host(first))
    blobs = list((tmp_path / "store" / "v1" / "blobs").iterdir())
    assert len(blobs) == len({p.read_bytes() for p in blobs}) == 8


def test_a_snapshot_of_another_stack_or_arch_is_never_used(tmp_path: Path) -> None:
    store, _first = saved(tmp_path)
    newer = StackKey({**STACK.material, "vllm": "0.27.0"}, "sm_90")
    assert fetch_manifest(store, newer, "default") is None  # filed under its own stack
    assert fetch_manifest(store, StackKey(STACK.material, "sm_100"), "default") is None
    # a manifest copied under this stack's name, from another stack, is refused by what it says
    foreign = json.loads(manifest_path(tmp_path).read_text())
    foreign["stack"]["torch"] = "2.13.0"
    manifest_path(tmp_path).write_text(json.dumps(foreign))
    with pytest.raises(
        SnapshotRejected, match=re.escape("another software stack: torch 2.13.0 there, 2.11.0 here")
    ):
        fetch_manifest(store, STACK, "default")


def test_a_tampered_blob_costs_only_its_file_and_the_group_that_names_it(tmp_path: Path) -> None:
    store, _first = saved(tmp_path)
    snapshot = fetch_manifest(store, STACK, "default")[0]  # type: ignore[index]
    victim = next(f for f in snapshot.files if f.path.endswith(".cubin"))
    blob = tmp_path / "store" / "v1" / "blobs" / victim.sha256
    blob.write_bytes(b"\x7fELF cubiX")  # same size, other bytes
    second = tmp_path / "host-b"
    result = restore(store, snapshot, host(second))
    assert result.integrity == ["triton/QJ4T/fused_recurrent_fwd.cubin"]
    assert result.refused == {"a Triton group whose kernels are not all here": 1}
    assert result.landed == 6 and not result.complete
    landed = files_under(second)
    assert "triton/QJ4T/fused_recurrent_fwd.cubin" not in landed
    assert "triton/QJ4T/__grp__fused_recurrent_fwd.json" not in landed  # never a group without its kernel
    assert not [name for name in landed if name.endswith(".fetch")]  # no temporary left behind


def test_a_missing_blob_costs_only_its_file(tmp_path: Path) -> None:
    store, _first = saved(tmp_path)
    snapshot = fetch_manifest(store, STACK, "default")[0]  # type: ignore[index]
    gone = next(f for f in snapshot.files if f.layer == "vllm")
    (tmp_path / "store" / "v1" / "blobs" / gone.sha256).unlink()
    result = restore(store, snapshot, host(tmp_path / "host-b"))
    assert result.integrity == [f"vllm/{gone.path}"] and result.landed == 7


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (lambda text: text[: len(text) // 2], "not JSON"),
        (
            lambda text: text.replace(
                '"torch_compile_cache/7c1f/rank_0_0/backbone/computation_graph.py"', '"../../../etc/cron.d/x"'
            ),
            "not a plain relative path",
        ),
        (lambda text: text.replace('"mode":420', '"mode":2541', 1), "within 0755"),
        (
            lambda text: text.replace('"schema":"jitguard.warm-snapshot/1"', '"schema":"x"'),
            "not a jitguard warm",
        ),
    ],
    ids=["truncated", "climbs-out", "setuid-mode", "foreign-schema"],
)
def test_a_damaged_manifest_is_refused_before_anything_is_written(
    tmp_path: Path, damage: object, message: str
) -> None:
    store, _first = saved(tmp_path)
    path = manifest_path(tmp_path)
    path.write_text(damage(path.read_text()))  # type: ignore[operator]
    with pytest.raises(SnapshotRejected, match=message):
        fetch_manifest(store, STACK, "default")


def test_a_pipe_where_the_manifest_belongs_is_a_miss_without_waiting(tmp_path: Path) -> None:
    # A named pipe with no writer: a blocking open would hang the engine's start.
    store, _first = saved(tmp_path)
    path = manifest_path(tmp_path)
    path.unlink()
    os.mkfifo(path)
    assert fetch_manifest(ArtifactStore(store.url, timeout=600.0), STACK, "default") is None


def test_a_link_planted_in_a_cache_dir_is_never_followed(tmp_path: Path) -> None:
    store, _first = saved(tmp_path)
    second, outside = tmp_path / "host-b", tmp_path / "outside"
    outside.mkdir()
    (second / "triton").mkdir(parents=True)
    (second / "triton" / "QJ4T").symlink_to(outside)  # the kernels' directory, planted as a link
    (second / "vllm" / "torch_compile_cache" / "7c1f" / "rank_0_0" / "backbone").mkdir(parents=True)
    planted = (
        second / "vllm" / "torch_compile_cache" / "7c1f" / "rank_0_0" / "backbone" / "computation_graph.py"
    )
    planted.symlink_to(outside / "victim.py")  # a file planted as a link to somewhere else
    snapshot = fetch_manifest(store, STACK, "default")[0]  # type: ignore[index]

    result = restore(store, snapshot, host(second))

    assert list(outside.iterdir()) == []  # nothing written through either link
    assert planted.is_symlink()
    assert result.refused == {"a link in the way": 5}  # the 4 Triton files and the planted one
    assert result.landed == 3


def test_a_directory_others_can_write_is_not_written_into(tmp_path: Path) -> None:
    store, _first = saved(tmp_path)
    second = tmp_path / "host-b"
    (second / "inductor" / "fxgraph").mkdir(parents=True)
    (second / "inductor" / "fxgraph").chmod(0o777)
    snapshot = fetch_manifest(store, STACK, "default")[0]  # type: ignore[index]
    result = restore(store, snapshot, host(second))
    assert result.refused == {"a directory of another user or that others can write": 1}
    assert not (second / "inductor" / "fxgraph" / "ab").exists()


def test_names_a_restore_would_write_are_plain_relative_paths() -> None:
    assert is_safe_relative("torch_compile_cache/7c1f/rank_0_0/a.py")
    assert is_safe_relative("QJ4T/.hidden")
    for bad in ("/etc/passwd", "a/../b", "../x", "a//b", "a/./b", "", "a\0b", "a/ b"):
        assert not is_safe_relative(bad), bad


def test_layers_are_found_where_each_tool_looks() -> None:
    env = {"HOME": "/home/u", "TMPDIR": "/scratch"}
    found = {c.name: (str(c.root), c.variable) for c in layers(env, Path("/home/u/.cache/jitguard"))}
    assert found["vllm"] == ("/home/u/.cache/vllm", None)
    assert found["triton"] == ("/home/u/.triton/cache", None)
    assert found["inductor"][0].startswith("/scratch/torchinductor_")
    assert found["flashinfer"] == ("/home/u/.cache/flashinfer", None)
    assert found["jitguard"] == ("/home/u/.cache/jitguard/kernels", None)
    assert found["tilelang"] == ("/home/u/.tilelang/cache", None)  # os.path.expanduser, XDG not read
    moved = {
        "HOME": "/home/u",
        "VLLM_CACHE_ROOT": "/data/c/vllm",
        "XDG_CACHE_HOME": "/xdg",
        "TRITON_HOME": "/t",
        "TILELANG_CACHE_DIR": "/data/c/tilelang",
    }
    found = {c.name: (str(c.root), c.variable) for c in layers(moved, Path("/j"))}
    assert found["tilelang"] == ("/data/c/tilelang", "TILELANG_CACHE_DIR")
    assert found["vllm"] == ("/data/c/vllm", "VLLM_CACHE_ROOT")
    assert found["sglang"] == ("/home/u/.cache/sglang", None)  # SGLang does not read XDG_CACHE_HOME
    assert found["triton"] == ("/t/.triton/cache", "TRITON_HOME")


def test_a_tilelang_kernel_lands_under_another_root_where_tilelang_looks(tmp_path: Path) -> None:
    """TileLang's cache key holds no path, so its entries travel as they are: under the new host's own
    TILELANG_CACHE_DIR, at the same place relative to it."""
    entry = "0.1.7/linux-x86_64/kernels/4be1c0ffee/kernel_lib.so"
    first = CacheLayer("tilelang", tmp_path / "host-a" / ".tilelang" / "cache", None)
    (first.root / entry).parent.mkdir(parents=True)
    (first.root / entry).write_bytes(b"\x7fELF" + b"\x00" * 60)
    store = store_at(tmp_path)
    assert save(store, STACK, "default", (first,)).uploaded_files == 1
    second = CacheLayer("tilelang", tmp_path / "elsewhere" / "tl", "TILELANG_CACHE_DIR")
    snapshot = fetch_manifest(store, STACK, "default")[0]  # type: ignore[index]
    restore(store, snapshot, (second,))
    assert files_under(second.root) == files_under(first.root)


def test_a_cache_inside_another_is_one_layer() -> None:
    env = {"HOME": "/h", "TORCHINDUCTOR_CACHE_DIR": "/c/inductor", "TRITON_CACHE_DIR": "/c/inductor/triton/0"}
    names = [c.name for c in layers(env, Path("/h/.cache/jitguard"))]
    assert "inductor" in names and "triton" not in names


def test_a_named_pipe_where_a_cache_file_belongs_is_refused_without_hanging(tmp_path: Path) -> None:
    store, _first = saved(tmp_path)
    second = tmp_path / "host-b"
    (second / "triton" / "QJ4T").mkdir(parents=True)
    os.mkfifo(
        second / "triton" / "QJ4T" / "fused_recurrent_fwd.cubin"
    )  # no writer: a blocking open would hang
    snapshot = fetch_manifest(store, STACK, "default")[0]  # type: ignore[index]
    result = restore(store, snapshot, host(second))
    assert result.refused == {
        "not a regular file in the way": 1,
        "a Triton group whose kernels are not all here": 1,
    }
    assert result.landed == 6
