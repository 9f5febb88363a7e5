"""One real vLLM engine start on a small Qwen3-Next (random weights, no download, no tokenizer), for
``benchmarks/vllm_engine.py`` and ``tests/gpu/vllm``:

    python benchmarks/vllm_engine_start.py model DIR [qwen3-next|qwen3]     # write the model's config.json
    python benchmarks/vllm_engine_start.py serve DIR auto|triton|flashinfer greedy|top [eager|compiled]

Models: ``qwen3-next`` (default), 4 layers, 3 of them GDN, with MoE; ``qwen3``, 2 dense layers: nothing
for FlashInfer's GDN or Triton's FLA/MoE kernels to compile, for scenarios about other choices (the sampler).

``serve`` prints ``BENCH READY <monotonic>`` once the engine is up, ``BENCH TTFT <s>`` for a one-token
generate and ``BENCH GENERATED <n>`` for an 8-token one; ``top`` samples with top-k/top-p (vLLM's
FlashInfer sampler, unless it is off), ``greedy`` does not. TP1, Triton attention; ``eager`` (the default
here, for the scenarios about a verdict) or ``compiled``: vLLM's own default, torch.compile and CUDA graphs, as
users run it. ``BENCH_KV_CACHE_BYTES`` sets ``kv_cache_memory_bytes`` (several engines on one GPU: vLLM's
memory profiling would count the others), ``BENCH_GPU_UTIL`` its ``gpu_memory_utilization`` (default 0.25).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path


def write_model(directory: Path, kind: str = "qwen3-next") -> Path:
    """A 4-layer Qwen3-Next (layers 0-2 GDN, 3 full attention) with the real model's GDN heads (K = V = 128),
    or (``kind="qwen3"``) a 2-layer dense Qwen3 of the same width."""
    if kind == "qwen3":
        return _write_qwen3(directory)
    from transformers import Qwen3NextConfig

    config = Qwen3NextConfig(
        hidden_size=512,
        num_hidden_layers=4,
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


def _write_qwen3(directory: Path) -> Path:
    from transformers import Qwen3Config

    config = Qwen3Config(
        hidden_size=512,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=128,
        intermediate_size=1024,
        vocab_size=2048,
        max_position_embeddings=4096,
        bos_token_id=1,
        eos_token_id=2,
    )
    config.architectures = ["Qwen3ForCausalLM"]
    config.save_pretrained(directory)
    return directory


def serve(model: str, gdn: str, sampling: str, mode: str = "eager") -> None:
    import os

    from vllm import LLM, SamplingParams

    kwargs: dict[str, object] = dict(
        model=model,
        load_format="dummy",
        skip_tokenizer_init=True,
        enforce_eager=mode == "eager",
        max_model_len=1024,
        gpu_memory_utilization=float(os.environ.get("BENCH_GPU_UTIL", "0.25")),
        dtype="bfloat16",
        attention_backend="TRITON_ATTN",
    )
    if os.environ.get("BENCH_SKIP_ROUTER_WARMUP") == "1":
        # vLLM 0.26.0 warms a DeepSeek-shaped router GEMM (quack-kernels) on every SM90 start; no quack-kernels
        # release works with the nvidia-cutlass-dsl 4.6.0 it pins (0.4.0: no cutlass.base_dsl.Arch; 0.5.0: no
        # cute.core.ThrMma), so the engine dies there, stock or not. Skipped here, said in the results' notes;
        # the engine core is forked (VLLM_WORKER_MULTIPROC_METHOD=fork) and inherits it.
        from vllm.model_executor.warmup import kernel_warmup

        kernel_warmup._warmup_ll_bf16_router_gemm = lambda: None
    if os.environ.get("BENCH_KV_CACHE_BYTES"):
        kwargs["kv_cache_memory_bytes"] = int(os.environ["BENCH_KV_CACHE_BYTES"])
    if gdn != "auto":
        kwargs["gdn_prefill_backend"] = gdn
    llm = LLM(**kwargs)
    print("BENCH READY", time.monotonic(), flush=True)
    top = dict(temperature=0.8, top_k=20, top_p=0.9) if sampling == "top" else dict(temperature=0.0)
    prompt = {"prompt_token_ids": list(range(1, 200))}  # a prefill long enough for the chunked GDN kernel
    start = time.monotonic()
    llm.generate([prompt], SamplingParams(max_tokens=1, detokenize=False, **top))
    print("BENCH TTFT", time.monotonic() - start, flush=True)
    out = llm.generate([prompt], SamplingParams(max_tokens=8, detokenize=False, **top))
    print("BENCH GENERATED", len(out[0].outputs[0].token_ids), flush=True)


if __name__ == "__main__":
    if sys.argv[1] == "model":
        write_model(Path(sys.argv[2]), *sys.argv[3:4])
    else:
        serve(*sys.argv[2:6])
