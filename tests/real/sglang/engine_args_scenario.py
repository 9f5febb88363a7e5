"""Runs inside an SGLang test environment (.ci/install_sglang.sh): benchmarks/sglang_engine_start.py's model and
engine options against the release's REAL ``ServerArgs`` and ``ModelConfig``, as ``sglang.Engine`` builds them
from its keyword arguments. Two additions only this machine needs: ``device="cpu"`` (SGLang finds no
accelerator here) and ``disable_radix_cache`` (the hybrid model's radix cache needs FLA's CUDA kernels).

Usage: ``python engine_args_scenario.py MODEL_DIR``; prints one ``RESULT {json}`` line."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

BENCHMARKS = Path(__file__).resolve().parents[3] / "benchmarks"
FIELDS = (
    "attention_backend",
    "linear_attn_backend",
    "linear_attn_prefill_backend",
    "load_format",
    "skip_tokenizer_init",
    "disable_cuda_graph",
)
HEADS = ("linear_key_head_dim", "linear_value_head_dim", "linear_num_key_heads", "linear_num_value_heads")


def main(model: str) -> dict[str, Any]:
    sys.path.insert(0, str(BENCHMARKS))
    import sglang_engine_start as start

    assert start.main(["model", model]) == 0
    from sglang.srt.configs.model_config import ModelConfig
    from sglang.srt.server_args import ServerArgs

    out: dict[str, Any] = {}
    for prefill in ("flashinfer", "auto"):
        args = ServerArgs(
            **start.engine_kwargs(model, prefill, "triton"), device="cpu", disable_radix_cache=True
        )
        out[prefill] = {name: getattr(args, name) for name in FIELDS}
    config = ModelConfig.from_server_args(args).hf_config
    out["model"] = {"architectures": config.architectures, **{h: getattr(config, h) for h in HEADS}}
    out["model"]["linear_layers"] = list(config.linear_layer_ids)  # SGLang's own Qwen3NextConfig
    return out


if __name__ == "__main__":
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    outcome = main(sys.argv[1])
    print("RESULT " + json.dumps(outcome), flush=True)
