"""FlashInfer's JIT through jitguard's hook with an artifact store, REAL flashinfer 0.6.6 and nvcc: the first
"host" builds a module and publishes it; the second (another workspace, another jitguard cache) fetches it
and compiles nothing; a tampered store is refused and the module built locally instead."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from flashinfer_066 import NEEDS_FLASHINFER_066
from services import NEEDS_FSSPEC

SCENARIOS = Path(__file__).with_name("flashinfer_share_scenarios.py")

pytestmark = [
    *NEEDS_FLASHINFER_066,
    NEEDS_FSSPEC,
]


@pytest.fixture(scope="module")
def fleet(
    tmp_path_factory: pytest.TempPathFactory, stub_libcuda_builder: Callable[..., Path]
) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("fleet")
    work = stub_libcuda_builder(root / "stub")
    source = work / "tiny.cu"
    source.write_text("__global__ void jitguard_share_tiny(float* x) { x[threadIdx.x] *= 3.0f; }\n")
    toolkits = [Path(p) for p in (os.environ.get("CUDA_HOME"), "/usr/local/cuda") if p]
    cuda_home = next((t for t in toolkits if (t / "lib64" / "libcudart.so").exists()), None)
    if cuda_home is None:
        pytest.skip(f"no CUDA toolkit with lib64/libcudart.so among {toolkits}")
    (root / "store").mkdir()
    base = {k: v for k, v in os.environ.items() if not k.startswith(("JITGUARD_", "FLASHINFER_", "SCCACHE_"))}
    base.update(
        {
            "FLASHINFER_CUDA_ARCH_LIST": "9.0a",
            "FLASHINFER_EXTRA_LDFLAGS": f"-L{work}",
            "CUDA_HOME": str(cuda_home),
            "JITGUARD_SHARE": f"file://{root / 'store'}",
            "JITGUARD_LOCK_TIMEOUT": "300",
        }
    )
    return {"root": root, "source": source, "env": base}


def _host(fleet: dict[str, Any], name: str, **extra: str) -> dict[str, Any]:
    root: Path = fleet["root"]
    env = dict(fleet["env"])
    env.update(
        {
            "FLASHINFER_WORKSPACE_BASE": str(root / name / "workspace"),
            "JITGUARD_CACHE_DIR": str(root / name / "cache"),
            **extra,
        }
    )
    proc = subprocess.run(
        [sys.executable, str(SCENARIOS), str(fleet["source"])],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, f"host {name} crashed:\n{proc.stdout}\n{proc.stderr}"
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def test_a_second_host_fetches_the_module_its_first_host_published(fleet: dict[str, Any]) -> None:
    first = _host(fleet, "host-a", JITGUARD_SHARE_PUBLISH="1")
    assert first["objects"], "host a compiled the module"
    assert list((fleet["root"] / "store" / "v1" / "modules").rglob("*.json"))

    second = _host(fleet, "host-b")

    assert second["loaded"] == first["loaded"]
    assert second["objects"] == []  # nothing compiled on host b
    assert Path(second["so"]).read_bytes() == Path(first["so"]).read_bytes()
    assert second["again"] == "up-to-date" and second["again_shared"] == []  # the fetched library stands
    assert second["warnings"] == []


def test_a_tampered_store_is_refused_with_one_warning_and_the_module_built_here(
    fleet: dict[str, Any],
) -> None:
    _host(fleet, "host-a", JITGUARD_SHARE_PUBLISH="1")
    for blob in (fleet["root"] / "store" / "v1" / "blobs").iterdir():
        blob.write_bytes(b"\0" * blob.stat().st_size)  # same size, other bytes

    third = _host(fleet, "host-c")

    assert third["objects"], "host c built the module itself"
    assert len(third["warnings"]) == 1 and "refused" in third["warnings"][0]
    assert third["again"] == "up-to-date"
