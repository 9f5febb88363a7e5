"""One real SGLang engine start (its offline ``sglang.Engine``) on a tiny random-weight Qwen3-Next, for
``benchmarks/sglang_engine.py``:

    python benchmarks/sglang_engine_start.py model DIR                         # write the model's config.json
    python benchmarks/sglang_engine_start.py serve DIR auto|triton|flashinfer triton|fa3

The model is ``vllm_engine_start.write_model``'s: 4 layers (3 GDN, 1 full attention, MoE) with the real
model's GDN heads (K = V = 128), written by the transformers SGLang reads it with, plus the real checkpoints'
``full_attention_interval`` and ``torch_dtype`` (``as_real_checkpoint``). ``serve`` names the
linear-attention prefill backend (``auto``: SGLang chooses) and the full-attention backend (``fa3``, SGLang's
own default on an H200, needs sgl_kernel's FA3 build; ``triton`` when the payload left it out), with
``load_format="dummy"`` and ``skip_tokenizer_init`` (no download, no tokenizer) and SGLang's defaults
otherwise: CUDA graphs on. It prints ``BENCH READY <monotonic>`` once the engine is up, ``BENCH TTFT <s>`` for
a one-token generate and ``BENCH GENERATED <n>`` for an 8-token one (greedy, EOS ignored: random weights).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

PROMPT = list(range(1, 200))  # a prefill long enough for the chunked GDN kernel


def engine_kwargs(model: str, prefill: str, attention: str) -> dict[str, object]:
    """The options of the engine: the model, the backends named, and SGLang's defaults for all else."""
    kwargs: dict[str, object] = dict(
        model_path=model,
        load_format="dummy",
        skip_tokenizer_init=True,
        attention_backend=attention,
        log_level="info",
    )
    if prefill != "auto":
        kwargs["linear_attn_prefill_backend"] = prefill
    return kwargs


def serve(model: str, prefill: str, attention: str) -> int:
    import sglang

    kwargs = engine_kwargs(model, prefill, attention)
    engine = sglang.Engine(**kwargs)
    print("BENCH READY", time.monotonic(), flush=True)
    try:
        start = time.monotonic()
        engine.generate(input_ids=PROMPT, sampling_params={"max_new_tokens": 1, "temperature": 0.0})
        print("BENCH TTFT", time.monotonic() - start, flush=True)
        params = {"max_new_tokens": 8, "temperature": 0.0, "ignore_eos": True}
        out = engine.generate(input_ids=PROMPT, sampling_params=params)
        print("BENCH GENERATED", len(out["output_ids"]), flush=True)
    finally:
        engine.shutdown()
    return 0


def as_real_checkpoint(config: Path) -> None:
    """Add what the real checkpoints' config.json holds and transformers 5 does not write: its
    ``full_attention_interval`` (SGLang's own Qwen3NextConfig places its GDN and full-attention layers by it)
    and its ``torch_dtype`` bfloat16 (without one SGLang's ``dtype="auto"`` serves in float16 while its Mamba
    state cache stays bfloat16, and its causal-conv1d Triton kernel fails to compile on the mix)."""
    data = json.loads(config.read_text())
    full = [i for i, kind in enumerate(data.get("layer_types", [])) if kind == "full_attention"]
    data["full_attention_interval"] = full[0] + 1 if full else 4
    data["torch_dtype"] = "bfloat16"
    config.write_text(json.dumps(data, indent=2) + "\n")


def main(argv: list[str]) -> int:
    if len(argv) == 2 and argv[0] == "model":
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        from vllm_engine_start import write_model

        write_model(Path(argv[1]))
        as_real_checkpoint(Path(argv[1]) / "config.json")
        return 0
    if len(argv) == 4 and argv[0] == "serve" and argv[2] in ("auto", "triton", "flashinfer"):
        return serve(argv[1], argv[2], argv[3])
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":  # SGLang starts its scheduler with spawn: it re-imports this file
    raise SystemExit(main(sys.argv[1:]))
