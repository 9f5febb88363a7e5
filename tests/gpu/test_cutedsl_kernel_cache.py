"""jitguard's kernel cache with FlashInfer's real CuTeDSL GDN prefill (>= 0.6.14) on a GPU (marker `gpu`).

Run on the GPU host with flashinfer-python >= 0.6.14 and nvidia-cutlass-dsl importable:
    pytest -m gpu tests/gpu/test_cutedsl_kernel_cache.py -v
Each check is a fresh process (FlashInfer's own cache lives in process memory), sharing one cache dir: the
first compiles and keeps the kernel with the DSL's export, the next loads it with the DSL's loader, through
FlashInfer's own call and through jitguard's op; the outputs of both are the same bits; an entry damaged on
disk is compiled again, never loaded.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
    pytest.mark.skipif(
        importlib.util.find_spec("flashinfer") is None or importlib.util.find_spec("cutlass") is None,
        reason="needs flashinfer-python >= 0.6.14 and nvidia-cutlass-dsl",
    ),
]

SCRIPT = r"""
import hashlib, json, sys, torch
import jitguard
jitguard.install()
via = sys.argv[1]
torch.manual_seed(0)
T, D = 1024, 128
q = torch.nn.functional.normalize(torch.randn(T, 16, D, device="cuda"), dim=-1).bfloat16()
k = torch.nn.functional.normalize(torch.randn(T, 16, D, device="cuda"), dim=-1).bfloat16()
v = torch.randn(T, 32, D, device="cuda").bfloat16()
g = torch.log(0.9 + 0.1 * torch.rand(T, 32, device="cuda"))
beta = torch.rand(T, 32, device="cuda")
state = 0.1 * torch.randn(2, 32, D, D, device="cuda")
cu = torch.tensor([0, 512, 1024], device="cuda", dtype=torch.int64)
if via == "flashinfer":
    from flashinfer.gdn_prefill import chunk_gated_delta_rule
    o, s = chunk_gated_delta_rule(q, k, v, g.exp(), beta, initial_state=state, output_final_state=True, cu_seqlens=cu)
else:
    from jitguard.gdn import chunk_gated_delta_rule
    o, s = chunk_gated_delta_rule(q, k, v, g, beta, initial_state=state, output_final_state=True,
                                  cu_seqlens=cu, backend="flashinfer")
from jitguard.gdn.reference import recurrent_gated_delta_rule
ref_o, ref_s = recurrent_gated_delta_rule(q, k, v, g, beta, cu_seqlens=cu, initial_state=state)
rel = lambda a, b: float((a.double() - b).pow(2).mean().sqrt() / b.pow(2).mean().sqrt())
from flashinfer.gdn_kernels.delta_rule_dsl import custom_compile_cache
from jitguard.cutedsl.persisting_compile import is_routed
print("RESULT " + json.dumps({
    "sha": hashlib.sha256(o.float().cpu().numpy().tobytes()).hexdigest(),
    "out_rel": rel(o, ref_o), "state_rel": rel(s, ref_s), "routed": is_routed(custom_compile_cache),
}))
"""


def _run(via: str, cache: Path) -> tuple[dict, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("JITGUARD_")}
    env["JITGUARD_CACHE_DIR"] = str(cache)
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT, via], env=env, capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    line = [x for x in proc.stdout.splitlines() if x.startswith("RESULT ")][-1]
    return json.loads(line[7:]), proc.stderr


def _objects(cache: Path) -> list[Path]:
    return sorted((cache / "kernels").glob("*.o"))


@pytest.mark.parametrize("via", ["flashinfer", "op"])
def test_compiled_once_then_loaded_with_the_same_results(tmp_path: Path, via: str) -> None:
    cache = tmp_path / "cache"
    cold, cold_log = _run(via, cache)
    assert cold["routed"]
    assert "compiled the CuTeDSL kernel" in cold_log or "compiling the CuTeDSL kernel" in cold_log
    assert "kept the CuTeDSL kernel" in cold_log, cold_log[-3000:]
    assert _objects(cache)
    warm, warm_log = _run(via, cache)
    assert "loaded the CuTeDSL kernel" in warm_log, warm_log[-3000:]
    assert "compiling the CuTeDSL kernel" not in warm_log
    assert warm["sha"] == cold["sha"]  # the loaded kernel is the compiled one, bit for bit
    for result in (cold, warm):
        assert result["out_rel"] < 5e-3 and result["state_rel"] < 5e-3, result


def test_a_damaged_entry_is_compiled_again_not_loaded(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    cold, _ = _run("flashinfer", cache)
    for obj in _objects(cache):
        data = bytearray(obj.read_bytes())
        data[len(data) // 2] ^= 0xFF
        obj.write_bytes(bytes(data))
    again, log = _run("flashinfer", cache)
    assert "loaded the CuTeDSL kernel" not in log
    assert "kept the CuTeDSL kernel" in log
    assert again["sha"] == cold["sha"]
