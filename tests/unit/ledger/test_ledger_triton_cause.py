"""Why Triton compiled a kernel after a restore, read from Triton's cache as it lies on disk: other builds of
the same kernel (an argument it specializes on changed) or none (a path the first host never took); a FIFO or
a link planted where a build's metadata belongs is never waited on or followed."""

from __future__ import annotations

import json
import os
from pathlib import Path

from jitguard.ledger.tools import triton_miss_cause


def _build(cache: Path, directory: str, name: str, key: str) -> None:
    (cache / directory).mkdir(parents=True, mode=0o700)
    (cache / directory / f"{name}.json").write_text(json.dumps({"name": name, "hash": key}))


def test_other_builds_of_the_kernel_name_a_changed_specialization(tmp_path: Path) -> None:
    cache = tmp_path / "triton"
    _build(cache, "AAAA", "_causal_conv1d_fwd_kernel", "a" * 64)
    _build(cache, "BBBB", "_causal_conv1d_fwd_kernel", "b" * 64)
    _build(cache, "CCCC", "_other_kernel", "c" * 64)
    _build(cache, "DDDD", "_causal_conv1d_fwd_kernel", "d" * 64)  # the build that just compiled
    cause = triton_miss_cause(str(cache), "_causal_conv1d_fwd_kernel", "d" * 64)
    assert cause.startswith(f"Triton's cache ({cache}) has no kernel for its key {'d' * 16}")
    assert "but 2 other builds of _causal_conv1d_fwd_kernel" in cause and "tl.constexpr" in cause
    assert "kv_cache_memory_bytes" in cause


def test_no_other_build_says_the_first_host_never_compiled_it(tmp_path: Path) -> None:
    cache = tmp_path / "triton"
    _build(cache, "CCCC", "_other_kernel", "c" * 64)
    cause = triton_miss_cause(str(cache), "add", "e" * 64)
    assert "nor any other build of add: the start that filled it never compiled this kernel" in cause
    assert triton_miss_cause(str(tmp_path / "absent"), "add", "e" * 64).endswith("its key " + "e" * 16)


def test_a_fifo_or_a_link_where_metadata_belongs_is_not_read(tmp_path: Path) -> None:
    cache = tmp_path / "triton"
    (cache / "FIFO").mkdir(parents=True, mode=0o700)
    os.mkfifo(cache / "FIFO" / "add.json")  # no writer: a blocking open would hang the engine
    outside = tmp_path / "elsewhere.json"
    outside.write_text(json.dumps({"hash": "f" * 64}))
    (cache / "LINK").mkdir(mode=0o700)
    (cache / "LINK" / "add.json").symlink_to(outside)
    cause = triton_miss_cause(str(cache), "add", "e" * 64)
    assert "nor any other build of add" in cause
