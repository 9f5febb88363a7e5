"""A real vLLM engine on an H200 with jitguard's plugin (marker `gpu`): the decision happens in vLLM's own worker
processes, and the engine it leaves serves.

Needs vLLM installed on the GPU host (carried in as wheels; e.g. vllm==0.21.0, whose torch pin 2.11.0 matches the
host's torch 2.11 cu130). Run:
    pytest -m gpu tests/gpu/vllm -v -s
A small Qwen3-Next (random weights: ``load_format="dummy"``, no download, no tokenizer) is served with greedy
decoding from token ids. FlashInfer is made "doomed" for real by recording a failure of its GDN module in a fresh
jitguard failure cache under this host's fingerprint, so no ~6 min FlashInfer build is needed.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.slow,
    pytest.mark.skipif(
        importlib.util.find_spec("vllm") is None, reason="needs vLLM installed on the GPU host"
    ),
]

ENGINE = textwrap.dedent(
    """
    import sys
    from vllm import LLM, SamplingParams

    kwargs = dict(model=sys.argv[1], load_format="dummy", skip_tokenizer_init=True, enforce_eager=True,
                  max_model_len=1024, gpu_memory_utilization=0.3, dtype="bfloat16")
    if sys.argv[2] != "auto":
        kwargs["gdn_prefill_backend"] = sys.argv[2]
    llm = LLM(**kwargs)
    prompt = {"prompt_token_ids": list(range(1, 200))}  # a prefill long enough for the chunked GDN kernel
    out = llm.generate([prompt], SamplingParams(max_tokens=4, temperature=0.0, detokenize=False))
    print("GENERATED", len(out[0].outputs[0].token_ids), flush=True)
    """
)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from transformers import Qwen3NextConfig

    directory = tmp_path_factory.mktemp("qwen3-next-tiny")
    config = Qwen3NextConfig(
        hidden_size=512,
        num_hidden_layers=4,  # layers 0-2 GDN, 3 full attention
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=128,
        intermediate_size=1024,
        linear_num_key_heads=2,
        linear_num_value_heads=4,
        linear_key_head_dim=128,
        linear_value_head_dim=128,
        vocab_size=2048,
        num_experts=4,
        num_experts_per_tok=2,
        moe_intermediate_size=256,
        shared_expert_intermediate_size=256,
        bos_token_id=1,
        eos_token_id=2,
    )
    config.architectures = ["Qwen3NextForCausalLM"]
    config.save_pretrained(directory)
    return directory


@pytest.fixture
def doomed_env(tmp_path: Path) -> dict[str, str]:
    """A fresh jitguard cache holding a recorded failure of FlashInfer GDN for this host's fingerprint."""
    from jitguard.facts import collect
    from jitguard.findings.catalog import make
    from jitguard.gdn.backends.flashinfer import MODULE
    from jitguard.state.failure_cache import FailureCache

    assert MODULE is not None
    env = {k: v for k, v in os.environ.items() if k != "JITGUARD_DISABLE"}
    env["JITGUARD_CACHE_DIR"] = str(tmp_path / "jitguard-cache")
    facts = collect(env, cache_dir=Path(env["JITGUARD_CACHE_DIR"]))
    finding = make("build-oom-killed", backend="flashinfer", evidence=["recorded by tests/gpu/vllm"])
    FailureCache(Path(env["JITGUARD_CACHE_DIR"])).record_failure(MODULE, facts.fingerprint, [finding])
    return env


def serve(model: Path, backend: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", ENGINE, str(model), backend],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
        stdin=subprocess.DEVNULL,
    )


def test_engine_with_a_known_flashinfer_failure_serves_on_triton(
    model_dir: Path, doomed_env: dict[str, str]
) -> None:
    proc = serve(model_dir, "auto", doomed_env)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output[-6000:]
    assert "GENERATED 4" in proc.stdout
    warnings = [line for line in output.splitlines() if "jitguard: vLLM chose FlashInfer GDN prefill" in line]
    assert len(warnings) == 1, output[-6000:]  # TP1: one worker process, one warning
    assert "[gdn-cached-failure]" in warnings[0]


def test_engine_asked_for_flashinfer_stops_at_init(model_dir: Path, doomed_env: dict[str, str]) -> None:
    proc = serve(model_dir, "flashinfer", doomed_env)
    output = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert "GENERATED" not in proc.stdout
    assert "jitguard: FlashInfer GDN prefill was requested (--gdn-prefill-backend flashinfer)" in output
    assert "[gdn-cached-failure]" in output
