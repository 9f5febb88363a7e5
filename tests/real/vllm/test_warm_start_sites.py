"""Warm start against each vLLM release's real code: the cache root jitguard restores into is the one vLLM's
own ``envs.VLLM_CACHE_ROOT`` gives (variable set, XDG_CACHE_HOME set, neither; vLLM keeps DeepGEMM's cache
inside it too); the plugin wraps the real ``EngineCore._initialize_kv_caches`` (the moment the engine is
ready) on registration, and puts it back on ``unregister``; and the environment part of vLLM's compile-cache
key (its own ``hash_factors(envs.compile_factors())``) is the same under another HOME and XDG roots with the
plugin, where stock vLLM before 0.33 keys it on paths under them."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from jitguard.integrations.vllm.compile_key import LOCATION_ONLY
from scenario_runner import run_code

REPO = Path(__file__).resolve().parents[3]

SCRIPT = r"""
import json, os, sys
from pathlib import Path
from jitguard.facts.jit_caches import layer
ours = str(layer("vllm", dict(os.environ), Path("/unused")).root)
import vllm.envs as envs
from vllm.config.utils import hash_factors
theirs = envs.VLLM_CACHE_ROOT
stock_key = hash_factors(envs.compile_factors())
stock_paths = sorted(k for k, v in envs.compile_factors().items() if isinstance(v, str) and v.startswith("/"))
from jitguard.integrations import vllm as plugin
from jitguard.boundary.patches import original_of
plugin.register()
import vllm.v1.engine.core as core
wrapped = original_of(core.EngineCore.__dict__.get("_initialize_kv_caches")) is not None
jitguard_key = hash_factors(envs.compile_factors())
plugin.unregister()
print("RESULT " + json.dumps({
    "ours": ours, "theirs": theirs, "wrapped": wrapped,
    "unwrapped_after": original_of(core.EngineCore.__dict__.get("_initialize_kv_caches")) is None,
    "stock_key": stock_key, "stock_paths": stock_paths, "jitguard_key": jitguard_key,
    "stock_key_after": hash_factors(envs.compile_factors()),
}))
"""


def _run(release: Any, tmp_path: Path, **env_extra: str) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VLLM_", "XDG_", "JITGUARD_"))}
    env.update(
        {
            "HOME": str(tmp_path / "home"),
            "JITGUARD_CACHE_DIR": str(tmp_path / "jg"),
            "PYTHONPATH": f"{REPO / 'src'}{os.pathsep}{release.pythonpath}",
            "HF_HUB_OFFLINE": "1",
            **env_extra,
        }
    )
    return run_code(sys.executable, SCRIPT, env)


def test_the_vllm_layer_is_vllms_own_cache_root_and_the_ready_hook_is_real(
    release: Any, tmp_path: Path
) -> None:
    hosts = (
        {},
        {"XDG_CACHE_HOME": str(tmp_path / "xdg"), "XDG_CONFIG_HOME": str(tmp_path / "xdg-config")},
        {"VLLM_CACHE_ROOT": str(tmp_path / "vc"), "HOME": str(tmp_path / "another-home")},
    )
    found = [_run(release, tmp_path, **extra) for extra in hosts]
    for extra, one in zip(hosts, found, strict=True):
        assert one["ours"] == one["theirs"], extra
        assert one["wrapped"] and one["unwrapped_after"]
        assert one["stock_key_after"] == one["stock_key"], "unregister gives vLLM's own key back"
    # every host computes one environment key with the plugin: a snapshot restored there is looked for
    assert len({one["jitguard_key"] for one in found}) == 1, found
    if set(LOCATION_ONLY) <= set(found[0]["stock_paths"]):  # this vLLM keys on the paths (0.21-0.26 here)
        assert release.minor <= 26, "a release jitguard's docs say ignores them"
        assert len({one["stock_key"] for one in found}) == 3, found
    else:  # it ignores them itself (0.30, 0.33), and jitguard's key is vLLM's own
        assert release.minor >= 30, "a release jitguard's docs say keys on them"
        assert not set(LOCATION_ONLY) & set(found[0]["stock_paths"]), found[0]
        assert found[0]["jitguard_key"] == found[0]["stock_key"]
