"""Cold start of 4 ranks through the FlashInfer hook on a real GPU (H200): one builds, three wait visibly, all load.

Each rank is a real process doing exactly what an engine's rank does on its first GDN prefill call with jitguard
installed: ``jitguard.install()``, then FlashInfer's own ``get_gdn_prefill_module()`` (``build_and_load`` of
``gdn_prefill_sm90``, 34 TUs, ~6 min on 16 cores). The workspace is fresh, so the module is cold.

    python3 -m pytest -m gpu tests/gpu/supervise/test_hook_cold_start.py -v -s -p no:cacheprovider
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

RANKS = 4
# The H200 host runs one command for at most 10 minutes; a cold GDN build there takes ~6.
DEADLINE_S = 560.0

WORKER = r"""
import json, os, sys, time
start = time.monotonic()
import jitguard
assert jitguard.install(), "the hook did not install"
import flashinfer.gdn_prefill as gdn_prefill
module = gdn_prefill.get_gdn_prefill_module()
print(json.dumps({"pid": os.getpid(), "seconds": round(time.monotonic() - start, 1),
                  "has_gdn_prefill": hasattr(module, "gdn_prefill") or callable(module)}))
"""


def _nvcc_era_flashinfer() -> bool:
    try:
        version = importlib.metadata.version("flashinfer-python")
    except importlib.metadata.PackageNotFoundError:
        return False
    parts = tuple(int(p) for p in re.findall(r"\d+", version)[:3])
    return (0, 6, 3) <= parts <= (0, 6, 13)


pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(
        not _nvcc_era_flashinfer(), reason="needs an nvcc-era flashinfer-python (0.6.3-0.6.13)"
    ),
]


@pytest.mark.timeout(590)
def test_four_ranks_one_build_the_others_wait_visibly_and_all_load(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JITGUARD_", "MAX_JOBS"))}
    env.pop("FLASHINFER_WORKSPACE_BASE", None)
    env.update(
        {
            "FLASHINFER_WORKSPACE_BASE": str(tmp_path / "workspace"),  # cold: nothing built yet
            "JITGUARD_CACHE_DIR": str(tmp_path / "cache"),
            "JITGUARD_LOCK_TIMEOUT": "1200",
            "PYTHONUNBUFFERED": "1",
        }
    )
    start = time.monotonic()
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WORKER],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        for _ in range(RANKS)
    ]
    outputs = []
    try:
        for p in procs:
            outputs.append(p.communicate(timeout=max(1.0, DEADLINE_S - (time.monotonic() - start))))
    except subprocess.TimeoutExpired:
        pytest.fail(f"the cold start did not finish within {DEADLINE_S:.0f} s (the GPU host's command limit)")
    finally:
        for p in procs:  # no rank, and no compiler of a rank, outlives the test
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
    wall = time.monotonic() - start

    results = []
    for proc, (out, err) in zip(procs, outputs, strict=True):
        assert proc.returncode == 0, f"rank {proc.pid} failed:\n{err[-4000:]}"
        results.append((json.loads(out.strip().splitlines()[-1]), err))
    builders = [r for r, err in results if re.search(r"building gdn_prefill_sm90 with \d+ job", err)]
    assert len(builders) == 1, [err[-2000:] for _, err in results]
    builder_pid = builders[0]["pid"]
    for info, err in results:
        assert info["has_gdn_prefill"], info
        if info["pid"] != builder_pid:
            assert f"lock held by pid {builder_pid} on" in err, err[-2000:]
    summary = {
        "wall_s": round(wall, 1),
        "builder": builder_pid,
        "ranks": [
            {**info, "wait_lines": sum("waiting for the build" in line for line in err.splitlines())}
            for info, err in results
        ],
    }
    print(json.dumps(summary, indent=1))
    out_dir = os.environ.get("OUT")
    if out_dir:
        Path(out_dir, "hook_cold_start.json").write_text(json.dumps(summary, indent=1))
