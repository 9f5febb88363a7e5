"""`jitguard build ninja --publish/--share`: two "hosts" (two project directories, two jitguard caches) share
a real nvcc module through a file:// store; the second compiles nothing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import breakage
import nvcc_project
from envelope_schemas import assert_valid
from services import NEEDS_FSSPEC

pytestmark = [
    pytest.mark.slow,
    NEEDS_FSSPEC,
]


def _env(host: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JITGUARD_", "SCCACHE_", "MAX_JOBS"))}
    env.update({"JITGUARD_CACHE_DIR": str(host / "jitguard-cache"), "NO_COLOR": "1"})
    return env


def _jitguard(
    host: Path, *args: str, env: dict[str, str] | None = None
) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "jitguard",
            "build",
            "ninja",
            str(host / "project"),
            "--progress",
            "none",
            "--json",
            *args,
        ],
        env={**_env(host), **(env or {})},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.stdout.strip(), proc.stderr
    payload = json.loads(proc.stdout)
    assert_valid(payload)
    return proc, payload


@pytest.fixture
def hosts(tmp_path: Path) -> tuple[Path, Path, str]:
    nvcc_project.needs_nvcc()
    for host in ("host-a", "host-b"):
        nvcc_project.write(tmp_path / host / "project")
    (tmp_path / "store").mkdir()
    return tmp_path / "host-a", tmp_path / "host-b", f"file://{tmp_path / 'store'}"


def test_the_second_host_fetches_the_module_and_compiles_nothing(hosts: tuple[Path, Path, str]) -> None:
    host_a, host_b, store = hosts
    built, first = _jitguard(host_a, "--publish", store)
    assert built.returncode == 0 and first["status"] == "built"
    assert [o["action"] for o in first["shared"]] == ["published"]

    fetched, second = _jitguard(host_b, "--share", store)

    assert fetched.returncode == 0, fetched.stderr
    assert second["status"] == "fetched" and second["attempts"] == 0
    assert second["shared"][0]["files"] == ["fleet_probe.so"]
    library = host_b / "project" / "fleet_probe.so"
    assert library.read_bytes() == (host_a / "project" / "fleet_probe.so").read_bytes()
    assert not list((host_b / "project").glob("*.o"))  # no compile ran on host b
    # Later runs see the fetched library as up to date, with or without the store.
    _, again = _jitguard(host_b)
    assert again["status"] == "up-to-date" and not list((host_b / "project").glob("*.o"))


def test_a_changed_source_is_not_served_from_the_store(hosts: tuple[Path, Path, str]) -> None:
    host_a, host_b, store = hosts
    _jitguard(host_a, "--publish", store)
    (host_b / "project" / "unit0.cu").write_text(nvcc_project.KERNEL.format(i=7))
    proc, payload = _jitguard(host_b, "--share", store)
    assert proc.returncode == 0 and payload["status"] == "built"
    assert payload["shared"][0]["action"] == "miss"


def test_a_store_that_is_not_there_is_one_warning_and_a_local_build(hosts: tuple[Path, Path, str]) -> None:
    _, host_b, store = hosts
    proc, payload = _jitguard(host_b, "--share", store + "/not-mounted")
    assert proc.returncode == 0 and payload["status"] == "built"
    assert payload["shared"][0]["action"] == "failed"
    warnings = [line for line in proc.stderr.splitlines() if "cannot fetch" in line]
    assert len(warnings) == 1 and "building it here" in warnings[0]


def test_a_publish_that_fails_fails_the_command_but_keeps_the_build(hosts: tuple[Path, Path, str]) -> None:
    host_a, _, store = hosts
    blocker = Path(store.removeprefix("file://")) / "v1"
    blocker.write_text("a file where the store's directory should be")
    proc, payload = _jitguard(host_a, "--publish", store)
    assert proc.returncode == 1
    assert payload["status"] == "built" and payload["shared"][0]["action"] == "failed"
    assert (host_a / "project" / "fleet_probe.so").exists()


def test_without_fsspec_the_store_is_one_warning_naming_the_extra_and_a_local_build(
    hosts: tuple[Path, Path, str], tmp_path: Path
) -> None:
    _, host_b, store = hosts
    broken = {
        "PYTHONPATH": os.pathsep.join(
            [str(breakage.sitecustomize_dir(tmp_path / "broken")), os.environ.get("PYTHONPATH", "")]
        ),
        **breakage.environ(block_modules=["fsspec"]),
    }
    proc, payload = _jitguard(host_b, "--share", store, env=broken)
    assert proc.returncode == 0 and payload["status"] == "built"
    warnings = [line for line in proc.stderr.splitlines() if "cannot fetch" in line]
    assert len(warnings) == 1 and "pip install fsspec" in warnings[0]
