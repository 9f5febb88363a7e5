"""Which compiles go through sccache, when it is on, and how its JSON stats read (sccache 0.16's shape)."""

from __future__ import annotations

import json
from pathlib import Path

from jitguard.fleet import compiler_cache, compiler_cache_launch

# Trimmed from `sccache --show-stats --stats-format json` (0.16.0) after one nvcc compile that hit.
STATS = json.loads(
    '{"stats":{"compile_requests":2,"requests_executed":12,'
    '"cache_errors":{"counts":{},"adv_counts":{}},'
    '"cache_hits":{"counts":{"PTX":2,"CUDA":1,"CUDA (Device code)":1,"CUBIN":1},"adv_counts":{}},'
    '"cache_misses":{"counts":{"CUBIN":1},"adv_counts":{}},'
    '"cache_timeouts":0,"cache_read_errors":1,"non_cacheable_compilations":2,"cache_write_errors":0},'
    '"cache_location":"Local disk","version":"0.16.0"}'
)
ATTEMPT = {
    compiler_cache_launch.ATTEMPT_DIR_ENV: "/tmp/a1",
    compiler_cache_launch.ATTEMPT_BINARY_ENV: "/usr/bin/sccache",
}


def test_every_nvcc_step_counts_as_a_hit_or_a_miss() -> None:
    stats = compiler_cache.parse_stats(STATS, "local disk")
    assert (stats.compile_requests, stats.hits, stats.misses, stats.errors) == (2, 5, 1, 1)
    assert stats.describe() == "sccache (local disk): 5 hits, 1 misses (83% hits), 1 cache errors"


def test_a_malformed_stats_document_reads_as_zero() -> None:
    stats = compiler_cache.parse_stats({"stats": {"cache_hits": "many", "compile_requests": "2"}}, "redis")
    assert (stats.compile_requests, stats.hits, stats.misses) == (0, 0, 0)


def test_only_compiles_go_through_sccache() -> None:
    assert compiler_cache_launch.wrapper_for(["/usr/local/cuda/bin/nvcc", "-c", "a.cu", "-o", "a.o"], ATTEMPT)
    assert compiler_cache_launch.wrapper_for(["x86_64-linux-gnu-g++", "-c", "a.cpp"], ATTEMPT)
    assert (
        compiler_cache_launch.wrapper_for(["c++", "a.o", "-shared", "-o", "m.so"], ATTEMPT) is None
    )  # a link
    assert (
        compiler_cache_launch.wrapper_for(["ccache", "nvcc", "-c", "a.cu"], ATTEMPT) is None
    )  # wrapped already
    assert compiler_cache_launch.wrapper_for(["python", "gen.py", "-c"], ATTEMPT) is None
    assert (
        compiler_cache_launch.wrapper_for(["nvcc", "-c", "a.cu"], {}) is None
    )  # the build does not use the cache


def test_auto_turns_on_only_when_sccache_is_configured(tmp_path: Path) -> None:
    binary = tmp_path / "sccache"
    binary.write_text("#!/bin/sh\necho sccache 0.16.0\n")
    binary.chmod(0o755)
    env = {"JITGUARD_SCCACHE": str(binary)}
    assert compiler_cache.choose(env).binary is None
    on = compiler_cache.choose({**env, "SCCACHE_REDIS_ENDPOINT": "redis://cache:6379"})
    assert on.binary == str(binary) and on.backend == "redis" and "SCCACHE_REDIS_ENDPOINT" in on.reason
    assert compiler_cache.choose({**env, "JITGUARD_COMPILER_CACHE": "sccache"}).binary == str(binary)
    assert (
        compiler_cache.choose({**env, "SCCACHE_DIR": "/c", "JITGUARD_COMPILER_CACHE": "off"}).binary is None
    )


def test_an_sccache_that_does_not_run_is_a_warning(tmp_path: Path) -> None:
    binary = tmp_path / "sccache"
    binary.write_text("#!/bin/sh\necho broken >&2\nexit 3\n")
    binary.chmod(0o755)
    choice = compiler_cache.choose({"JITGUARD_SCCACHE": str(binary), "JITGUARD_COMPILER_CACHE": "sccache"})
    assert choice.binary is None and choice.warning and "exited with 3" in choice.warning
