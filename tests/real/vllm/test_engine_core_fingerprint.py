"""vLLM's engine-core process judges on the fingerprint that ``jitguard doctor`` reports in the same
environment, started as ``LLM()`` starts it (fork) and as ``vllm serve`` does (spawn), with the REAL code of
each release and its real dependencies.

Before this held, ``from vllm import LLM`` imported opencv's ``cv2``, which prepends
``<site-packages>/cv2/../../lib64:`` to LD_LIBRARY_PATH in every process that imports it (once more in each
spawned one): the engine core keyed the failure cache differently from ``jitguard doctor``, ``jitguard
build`` and the process that started it, so a failure recorded outside the engine was never seen inside it
(a full FlashInfer build started instead: tests/gpu/vllm ran 480 s on the H200), and ``jitguard cache``
/ ``doctor --engine vllm`` never showed what the engine recorded.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.slow

SCRIPT = Path(__file__).with_name("engine_core_scenario.py")


def doctor_fingerprint(env: dict[str, str]) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "jitguard", "doctor", "--json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        stdin=subprocess.DEVNULL,
    )
    fingerprint: str = json.loads(done.stdout)["fingerprint"]
    return fingerprint


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_the_engine_core_judges_on_the_fingerprint_jitguard_doctor_reports(
    release: Any, situations: Any, method: str
) -> None:
    env = situations.machine(VLLM_WORKER_MULTIPROC_METHOD=method)
    result, output = release.run({}, env, script=SCRIPT)
    assert result["method"] == method and result["registered"], output[-4000:]
    assert result["fingerprint"] == doctor_fingerprint(env), (
        f"the engine core ({method}) keyed the failure cache apart from `jitguard doctor`; LD_LIBRARY_PATH "
        f"in each process: {result['ld_library_path']}"
    )
