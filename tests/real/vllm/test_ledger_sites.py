"""The start ledger against each vLLM release's real code: the plugin wraps both ready points (the engine
core's ``EngineCore._initialize_kv_caches`` and the worker's ``Worker.compile_or_warm_up_model``), makes the
start id its child processes inherit, and every field the ledger reads of vLLM's compilation counter and
``CompilationConfig`` is one the release has (a renamed field would read as 0 forever)."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from jitguard.ledger.tools import VLLM_CACHED, VLLM_COMPILED
from scenario_runner import run_code

REPO = Path(__file__).resolve().parents[3]

SCRIPT = r"""
import dataclasses, json, os
from jitguard.boundary.patches import original_of
from jitguard.integrations import vllm as plugin
plugin.register()
import vllm.compilation.counter as counter
import vllm.v1.engine.core as core
import vllm.v1.worker.gpu_worker as worker
from vllm.config import CompilationConfig
config = CompilationConfig()
print("RESULT " + json.dumps({
    "engine_core": original_of(core.EngineCore.__dict__.get("_initialize_kv_caches")) is not None,
    "worker": original_of(worker.Worker.__dict__.get("compile_or_warm_up_model")) is not None,
    "start_id": os.environ.get("JITGUARD_START_ID"),
    "counter_fields": [f.name for f in dataclasses.fields(counter.CompilationCounter)],
    "config": {name: hasattr(config, name) for name in ("compilation_time", "cache_dir")},
}))
"""


def test_both_ready_points_are_wrapped_and_the_counters_the_ledger_reads_exist(
    release: Any, tmp_path: Path
) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VLLM_", "JITGUARD_"))}
    env.update(
        HOME=str(tmp_path / "home"),
        JITGUARD_CACHE_DIR=str(tmp_path / "jg"),
        PYTHONPATH=f"{REPO / 'src'}{os.pathsep}{release.pythonpath}",
        HF_HUB_OFFLINE="1",
    )
    found = run_code(sys.executable, SCRIPT, env)
    assert found["engine_core"] and found["worker"]
    assert found["start_id"]  # made by the first process, for the EngineCore and workers it starts
    # Compiles and loads of vLLM's own cache in every release; the AOT counters (newer releases) read as 0 where
    # a release has none.
    assert {"num_inductor_compiles", "num_compiled_artifacts_loaded"} <= set(found["counter_fields"])
    assert set(VLLM_COMPILED + VLLM_CACHED) - set(found["counter_fields"]) <= {
        "num_aot_compiles",
        "num_aot_artifacts_loaded",
    }
    assert found["config"] == {"compilation_time": True, "cache_dir": True}
