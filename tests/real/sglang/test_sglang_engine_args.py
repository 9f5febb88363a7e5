"""benchmarks/sglang_engine.py's engine, checked on this machine against the REAL code of the SGLang release it
serves on the H200 (0.5.15): the model it writes is the hybrid GDN
model SGLang's own config reads (3 GDN layers with the real model's heads), and the options it passes are ones
that release's ``ServerArgs`` accepts and keeps (FlashInfer named for GDN prefill or not, CUDA graphs on)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.slow

SCENARIO = Path(__file__).with_name("engine_args_scenario.py")
# The releases whose real ServerArgs this machine can build and that pin the H200 host's torch 2.11: 0.5.16 and
# 0.5.17 can run there too, but their model config imports FlashInfer 0.6.14+, whose GDN decode module asks the
# CUDA device for its SM count at import (tests/real/sglang/process_table_scenario.py says the same).
SERVED = ((0, 5, 15), (0, 5, 15))


@pytest.fixture(scope="module")
def engine_args(release: Any, hosts: Any, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    if not SERVED[0] <= release.version_tuple <= SERVED[1]:
        pytest.skip(f"SGLang {release.version}: no ServerArgs without CUDA here, or a torch the H200 lacks")
    env = {**hosts.machine(), "PYTHONPATH": f"{Path(__file__).resolve().parents[3] / 'src'}:{release.src}"}
    model = tmp_path_factory.mktemp("sglang-engine-model") / "model"
    done = subprocess.run(
        [str(release.python), str(SCENARIO), str(model)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        stdin=subprocess.DEVNULL,
    )
    results = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    assert done.returncode == 0 and results, (done.stdout + done.stderr)[-6000:]
    outcome: dict[str, Any] = json.loads(results[-1][len("RESULT ") :])
    return outcome


def test_the_model_is_a_hybrid_gdn_model_with_the_real_heads(engine_args: dict[str, Any]) -> None:
    model = engine_args["model"]
    assert model["architectures"] == ["Qwen3NextForCausalLM"]
    assert model["linear_key_head_dim"] == model["linear_value_head_dim"] == 128
    assert model["linear_layers"] == [0, 1, 2]  # the 4th layer is full attention


def test_flashinfer_named_for_prefill_is_kept_with_cuda_graphs_on(engine_args: dict[str, Any]) -> None:
    named, auto = engine_args["flashinfer"], engine_args["auto"]
    assert (
        named["linear_attn_prefill_backend"] == "flashinfer" and auto["linear_attn_prefill_backend"] is None
    )
    for args in (named, auto):
        assert args["linear_attn_backend"] == "triton"  # SGLang's own default for what is not named
        assert args["load_format"] == "dummy" and args["skip_tokenizer_init"]
        assert args["disable_cuda_graph"] is False and args["attention_backend"] == "triton"
