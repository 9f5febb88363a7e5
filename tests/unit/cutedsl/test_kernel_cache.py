"""The kernel cache: verified entries, first publish kept, corrupt or foreign entries a miss, trust rules held."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from jitguard.cutedsl.kernel_cache import KernelCache, KernelKey

KEY = KernelKey("Kernel(bf16, alpha)", {"kernel": "k1", "arch": "sm_90a", "dsl": "nvidia-cutlass-dsl==4.6.0"})
OTHER = KernelKey("Kernel(fp16)", {"kernel": "k2", "arch": "sm_90a", "dsl": "nvidia-cutlass-dsl==4.6.0"})
BLOB = b"\x7fELF" + bytes(range(256)) * 64


def _manifest(cache: KernelCache, key: KernelKey) -> Path:
    return cache.root / f"{key.digest}.json"


def _object(cache: KernelCache, key: KernelKey) -> Path:
    return cache.root / json.loads(_manifest(cache, key).read_text())["object"]


def test_a_published_kernel_is_read_back_exactly(tmp_path: Path) -> None:
    cache = KernelCache(tmp_path)
    assert cache.get(KEY).entry is None
    assert cache.put(KEY, BLOB, format="cute-object") is True
    entry = cache.get(KEY).entry
    assert entry is not None
    assert entry.blob == BLOB
    assert entry.symbol == KEY.symbol and entry.symbol.isidentifier()
    assert entry.format == "cute-object"
    assert cache.get(OTHER).entry is None  # another key is another entry
    # private, like the rest of the cache dir
    assert oct(os.stat(_object(cache, KEY)).st_mode & 0o777) == "0o600"
    assert oct(os.stat(cache.root).st_mode & 0o777) == "0o700"


def test_the_key_digest_depends_on_every_part_of_the_material() -> None:
    base = dict(KEY.material)
    digests = {KEY.digest}
    for name in base:
        changed = KernelKey(KEY.name, {**base, name: base[name] + "x"})
        digests.add(changed.digest)
    assert len(digests) == len(base) + 1
    assert KernelKey("another name", base).digest == KEY.digest  # the name is for people only


def test_the_first_publish_is_kept(tmp_path: Path) -> None:
    cache = KernelCache(tmp_path)
    assert cache.put(KEY, BLOB, format="cute-object")
    assert cache.put(KEY, b"something else", format="cute-object") is False
    entry = cache.get(KEY).entry
    assert entry is not None and entry.blob == BLOB


@pytest.mark.parametrize(
    "damage",
    [
        "flip a byte",
        "truncate",
        "remove the object",
        "manifest of another key",
        "manifest not json",
        "schema",
    ],
)
def test_a_damaged_entry_is_a_miss_and_is_removed(tmp_path: Path, damage: str) -> None:
    cache = KernelCache(tmp_path)
    cache.put(KEY, BLOB, format="cute-object")
    obj, manifest = _object(cache, KEY), _manifest(cache, KEY)
    if damage == "flip a byte":
        data = bytearray(obj.read_bytes())
        data[100] ^= 0xFF
        obj.write_bytes(bytes(data))
    elif damage == "truncate":
        obj.write_bytes(BLOB[:10])
    elif damage == "remove the object":
        obj.unlink()
    elif damage == "manifest of another key":
        cache.put(OTHER, BLOB, format="cute-object")
        manifest.write_text(_manifest(cache, OTHER).read_text())
    elif damage == "manifest not json":
        manifest.write_text("{not json")
    elif damage == "schema":
        manifest.write_text(json.dumps({**json.loads(manifest.read_text()), "schema": "other/9"}))
    lookup = cache.get(KEY)
    assert lookup.entry is None
    assert lookup.reason != "no entry"
    assert not manifest.exists()  # dropped: the next compile publishes a good one
    assert cache.put(KEY, BLOB, format="cute-object") is True
    fresh = cache.get(KEY).entry
    assert fresh is not None and fresh.blob == BLOB


def test_an_object_others_can_write_is_not_read(tmp_path: Path) -> None:
    cache = KernelCache(tmp_path)
    cache.put(KEY, BLOB, format="cute-object")
    obj = _object(cache, KEY)
    obj.chmod(0o666)
    lookup = cache.get(KEY)
    assert lookup.entry is None
    assert "not trusted" in lookup.reason
    assert obj.exists()  # never removed as "corrupt": it is simply not used


def test_a_link_planted_as_the_object_is_not_followed(tmp_path: Path) -> None:
    cache = KernelCache(tmp_path)
    cache.put(KEY, BLOB, format="cute-object")
    obj = _object(cache, KEY)
    elsewhere = tmp_path / "elsewhere.o"
    elsewhere.write_bytes(BLOB)  # the same bytes: the link alone must be refused
    obj.unlink()
    obj.symlink_to(elsewhere)
    assert cache.get(KEY).entry is None


def test_a_cache_dir_others_can_write_is_not_used(tmp_path: Path) -> None:
    cache = KernelCache(tmp_path / "cache")
    cache.put(KEY, BLOB, format="cute-object")
    cache.root.chmod(0o777)
    assert cache.get(KEY).entry is None
    cache.root.chmod(0o700)
    assert cache.get(KEY).entry is not None


def test_a_cache_dir_that_cannot_be_written_keeps_nothing_and_says_so(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    blocked = tmp_path / "file-in-the-way"
    blocked.write_text("")
    cache = KernelCache(blocked)
    assert cache.put(KEY, BLOB, format="cute-object") is False
    assert "will be compiled again next time" in caplog.text
    assert cache.get(KEY).entry is None


def test_entries_and_clear(tmp_path: Path) -> None:
    cache = KernelCache(tmp_path)
    cache.put(KEY, BLOB, format="cute-object")
    cache.put(OTHER, BLOB + b"2", format="tvm-ffi-object")
    names = [m["name"] for m in cache.entries()]
    assert names == [KEY.name, OTHER.name]
    removed, stayed = cache.clear()
    assert removed == 4 and stayed == []
    assert cache.entries() == [] and cache.get(KEY).entry is None


def test_concurrent_publishers_leave_exactly_one_valid_entry(tmp_path: Path) -> None:
    """Eight processes publish the same key at once, each its own bytes: one manifest wins, and it and the
    object it names agree."""
    script = textwrap.dedent(
        f"""
        import sys
        from pathlib import Path
        from jitguard.cutedsl.kernel_cache import KernelCache, KernelKey
        key = KernelKey("k", {dict(KEY.material)!r})
        won = KernelCache(Path(sys.argv[1])).put(key, sys.argv[2].encode() * 50000, format="cute-object")
        print("won" if won else "kept")
        """
    )
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", script, str(tmp_path), f"writer{i}"], stdout=subprocess.PIPE, text=True
        )
        for i in range(8)
    ]
    outputs = [p.communicate(timeout=120)[0].strip() for p in procs]
    assert all(p.returncode == 0 for p in procs)
    assert outputs.count("won") == 1, outputs
    entry = KernelCache(tmp_path).get(KEY).entry
    assert entry is not None
    winner = outputs.index("won")
    assert entry.blob == f"writer{winner}".encode() * 50000
