"""Warm snapshots find SGLang's caches where SGLang's own code puts them: from 0.5.19 ``import sglang`` points
Triton, Inductor, FlashInfer's workspace and DeepGEMM under ``SGLANG_CACHE_DIR`` (unless set); 0.5.15 leaves
them at the tools' defaults. Run with each release's real code: the layers jitguard computes in the SGLang
process (where the plugin restores) and in a plain shell (``jitguard warm restore``) both hold every one of
those directories."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from scenario_runner import run_code

REPO = Path(__file__).resolve().parents[3]

SCRIPT = r"""
import json, os, sys
from pathlib import Path
from jitguard.facts.jit_caches import layers
shell = [str(c.root) for c in layers(dict(os.environ), Path(os.environ["JITGUARD_CACHE_DIR"]))]
import sglang  # noqa: F401  (what every SGLang process does first)
try:
    from sglang.srt.environ import envs
    deep_gemm = envs.SGLANG_DG_CACHE_DIR.get() if hasattr(envs, "SGLANG_DG_CACHE_DIR") else None
except Exception:
    deep_gemm = None
names = ("TRITON_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR", "FLASHINFER_WORKSPACE_BASE")
print("RESULT " + json.dumps({
    "set_by_sglang": {n: os.environ.get(n) for n in names},
    "deep_gemm": deep_gemm,
    "in_process": [str(c.root) for c in layers(dict(os.environ), Path(os.environ["JITGUARD_CACHE_DIR"]))],
    "shell": shell,
}))
"""


def _run(release: Any, home: Path) -> dict[str, Any]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("TRITON_", "TORCHINDUCTOR_", "FLASHINFER_", "SGLANG_", "XDG_"))
    }
    env.update(
        HOME=str(home),
        JITGUARD_CACHE_DIR=str(home / ".cache" / "jitguard"),
        PYTHONPATH=f"{REPO / 'src'}:{release.src}",
        HF_HUB_OFFLINE="1",
    )
    return run_code(release.python, SCRIPT, env)


def _within(path: str, roots: list[str]) -> bool:
    return any(path == root or path.startswith(root.rstrip("/") + "/") for root in roots)


def test_every_cache_sglang_points_somewhere_is_inside_a_warm_layer(release: Any, tmp_path: Path) -> None:
    found = _run(release, tmp_path / "home")
    sglang_root = str(tmp_path / "home" / ".cache" / "sglang")
    redirected = {name: value for name, value in found["set_by_sglang"].items() if value}
    if release.version_tuple >= (0, 5, 19):
        assert redirected == {
            "TRITON_CACHE_DIR": f"{sglang_root}/triton",
            "TORCHINDUCTOR_CACHE_DIR": f"{sglang_root}/inductor",
            "FLASHINFER_WORKSPACE_BASE": sglang_root,
        }
    else:  # the tools' own defaults: Triton's ~/.triton/cache; Inductor's tmp dir (set by Inductor itself)
        assert set(redirected) <= {"TORCHINDUCTOR_CACHE_DIR"}
        assert not redirected or Path(redirected["TORCHINDUCTOR_CACHE_DIR"]).name.startswith("torchinductor_")
    places = [*redirected.values()] + ([found["deep_gemm"]] if found["deep_gemm"] else [])
    if "TRITON_CACHE_DIR" not in redirected:
        places.append(str(tmp_path / "home" / ".triton" / "cache"))
    for place in places:
        assert _within(place, found["in_process"]), (place, found["in_process"])
        assert _within(place, found["shell"]), (place, found["shell"])  # `jitguard warm restore` in a shell
    assert sglang_root in found["shell"]
