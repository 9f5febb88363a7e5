"""A FlashInfer module build that fails in an engine is recorded by jitguard's build hook under FlashInfer's
module name, and the next process's verdict on the choice that needs it reads that record: the REAL
flashinfer 0.6.6 ``sampling`` module, the real nvcc (given a flag it rejects, so it fails at once, as a broken
toolchain does), a real link stub so pre-flight passes, and two separate processes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from flashinfer_066 import NEEDS_FLASHINFER_066, SAMPLING_BUILD

pytestmark = NEEDS_FLASHINFER_066

JUDGE = textwrap.dedent(
    """
    import json
    from jitguard.decision.engine_verdicts import ATTENTION, SAMPLER
    from jitguard.config import Settings
    from jitguard.facts import collect
    from jitguard.status.engine_choices import status_of

    facts, cache_dir = collect(), Settings.from_env().cache_dir
    print(json.dumps({c.key: [f.code for f in status_of(c, facts, cache_dir).blocking] for c in (SAMPLER, ATTENTION)}))
    """
)


def run(script: str, env: dict[str, str]) -> Any:
    done = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def env(
    tmp_path_factory: pytest.TempPathFactory, stub_libcuda_builder: Callable[..., Path]
) -> dict[str, str]:
    root = tmp_path_factory.mktemp("choice-records")
    stub = stub_libcuda_builder(root / "stub")
    toolkits = [Path(p) for p in (os.environ.get("CUDA_HOME"), "/usr/local/cuda") if p]
    cuda_home = next((t for t in toolkits if (t / "lib64" / "libcudart.so").exists()), None)
    if cuda_home is None:
        pytest.skip(f"no CUDA toolkit with lib64/libcudart.so among {toolkits}")
    base = {k: v for k, v in os.environ.items() if not k.startswith(("JITGUARD_", "FLASHINFER_", "MAX_JOBS"))}
    return {
        **base,
        "CUDA_HOME": str(cuda_home),
        "FLASHINFER_CUDA_ARCH_LIST": "9.0a",
        "FLASHINFER_WORKSPACE_BASE": str(root / "workspace"),
        "FLASHINFER_EXTRA_LDFLAGS": f"-L{stub}",
        "FLASHINFER_EXTRA_CUDAFLAGS": "--jitguard-test-no-such-nvcc-flag",
        "JITGUARD_CACHE_DIR": str(root / "cache"),
    }


def test_before_any_build_the_sampler_can_work_here(env: dict[str, str]) -> None:
    assert run(JUDGE, env) == {"sampler": [], "attention": []}  # pre-flight passes: the stub links


def test_the_failed_build_is_classified_and_the_next_process_takes_the_fallback(env: dict[str, str]) -> None:
    failure = run(SAMPLING_BUILD, env)
    assert failure == {"type": "BuildFailed", "codes": ["build-failed"]}
    verdicts = run(JUDGE, env)
    assert verdicts["sampler"] == ["flashinfer-cached-failure"]
    assert verdicts["attention"] == []  # another module: untouched
