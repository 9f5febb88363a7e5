"""Warm start against each vLLM release's real code: the cache root jitguard restores into is the one vLLM's
own ``envs.VLLM_CACHE_ROOT`` gives (variable set, XDG_CACHE_HOME set, neither; vLLM keeps DeepGEMM's cache
inside it too), and the plugin wraps the real ``EngineCore._initialize_kv_caches`` (the moment the engine is
ready) on registration, and puts it back on ``unregister``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[3]
SCRIPT = r"""
import json, os, sys
from pathlib import Path
from jitguard.facts.jit_caches import layer
ours = str(layer("vllm", dict(os.environ), Path("/unused")).root)
import vllm.envs as envs
theirs = envs.VLLM_CACHE_ROOT
from jitguard.integrations import vllm as plugin
from jitguard.boundary.patches import original_of
plugin.register()
import vllm.v1.engine.core as core
wrapped = original_of(core.EngineCore.__dict__.get("_initialize_kv_caches")) is not None
plugin.unregister()
print("RESULT " + json.dumps({
    "ours": ours, "theirs": theirs, "wrapped": wrapped,
    "unwrapped_after": original_of(core.EngineCore.__dict__.get("_initialize_kv_caches")) is None,
}))
"""


def _run(release: Any, tmp_path: Path, **env_extra: str) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VLLM_", "XDG_", "JITGUARD_"))}
    env.update(
        HOME=str(tmp_path / "home"),
        JITGUARD_CACHE_DIR=str(tmp_path / "jg"),
        PYTHONPATH=f"{REPO / 'src'}{os.pathsep}{release.pythonpath}",
        HF_HUB_OFFLINE="1",
        **env_extra,
    )
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=300
    )
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, proc.stdout[-3000:] + proc.stderr[-3000:]
    return dict(json.loads(lines[-1][len("RESULT ") :]))


def test_the_vllm_layer_is_vllms_own_cache_root_and_the_ready_hook_is_real(
    release: Any, tmp_path: Path
) -> None:
    for extra in ({}, {"XDG_CACHE_HOME": str(tmp_path / "xdg")}, {"VLLM_CACHE_ROOT": str(tmp_path / "vc")}):
        found = _run(release, tmp_path, **extra)
        assert found["ours"] == found["theirs"], extra
    assert found["wrapped"] and found["unwrapped_after"]
