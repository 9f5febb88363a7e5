"""Runs inside an SGLang test environment (.ci/install_sglang.sh): one scheduler's start up to its GDN attention
backend, with the REAL code of one SGLang release and the FlashInfer it pins, and jitguard's plugin loaded by
SGLang's own ``load_plugins()``.

For each entry of SPEC's ``runs``: a real ``ServerArgs`` for a small Qwen3-Next config (built, resolved and
pickled as the launcher hands it to a scheduler), SGLang's own linear-attention choice from it
(``resolve_linear_attn_backends``, 0.5.18+, or ``initialize_linear_attn_config``), then SGLang's real
``GDNAttnBackend(model_runner)``, whose kernel dispatcher builds SGLang's real ``FlashInferGDNKernel`` around
FlashInfer's real ``chunk_gated_delta_rule``: jitguard's proof calls it there, and on this CPU it fails.

Stand-ins, for the GPU only: SGLang's ``is_cuda()`` probes and torch's device queries answer as an H200's; the
model runner (and its module) is the few attributes the backend reads (its state pool holds the model's GDN shapes: 32 value
heads, 16 q/k heads, head dim 128). SPEC keys: ``runs`` (``[{"options": {ServerArgs field: value}, "prefill_default": "flashinfer" | null}]``:
what SGLang's ``flashinfer_gdn_prefill_default(runner)`` answers in its validated domain, 0.5.18+),
``torch_build`` (the version torch's metadata reports), ``record_pass`` (record a pass of the proof under this
start's key first, as an earlier start on a GPU would have). Prints the log, then ``RESULT {json}``.
"""

from __future__ import annotations

import importlib
import json
import logging
import os
import sys
import tempfile
from pathlib import Path
from types import SimpleNamespace
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "vllm"))

from scenario import h200_device_queries  # tests/real/vllm/scenario.py
from sglang_scenario import UTILS, describe, qwen3_next, server_args, torch_metadata

BACKEND = "sglang.srt.layers.attention.linear.gdn_backend"
KERNEL = "sglang.srt.layers.attention.linear.kernels.gdn_flashinfer"
RUNNER = "sglang.srt.model_executor.model_runner"
V_HEADS, QK_HEADS, DIM = 32, 16, 128


def on_a_gpu() -> None:
    """SGLang's CUDA probes and torch's device queries as on an H200 (this machine has no GPU). The model
    runner's module, which the backend modules import for its class name only, is a stand-in as the model
    runner is (its imports need the server's and the GPU's packages, which this venv does not hold)."""
    import types

    h200_device_queries()
    runner = types.ModuleType(RUNNER)
    runner.ModelRunner = type("ModelRunner", (), {})  # type: ignore[attr-defined]
    sys.modules.setdefault(RUNNER, runner)
    for name in (BACKEND, KERNEL):
        importlib.import_module(name).is_cuda = lambda: True


def model_runner(args: Any, backends: Any) -> Any:
    """What ``GDNAttnBackend.__init__`` reads of a model runner, with a state pool of the model's shapes."""
    import torch

    cache = SimpleNamespace(
        temporal=torch.zeros(1, 2, V_HEADS, DIM, DIM),
        conv=[torch.zeros(1, 2, 2 * QK_HEADS * DIM + V_HEADS * DIM, 3, dtype=torch.bfloat16)],
    )
    pool = SimpleNamespace(size=2, mamba_pool=SimpleNamespace(mamba_cache=cache))
    return SimpleNamespace(
        server_args=args,
        device="cpu",
        is_draft_worker=False,
        req_to_token_pool=pool,
        token_to_kv_pool=None,
        linear_attn_backends=backends,
        model_config=SimpleNamespace(dtype=torch.bfloat16),
    )


def start(model: str, run: dict[str, Any]) -> dict[str, Any]:
    """SGLang's choice, then its GDN attention backend, as one scheduler makes them."""
    import sglang.srt.runtime_context as context

    args = server_args(model, run.get("options", {}), None)
    utils = importlib.import_module(UTILS)
    out: dict[str, Any] = {"error": None}
    try:
        if hasattr(utils, "resolve_linear_attn_backends"):
            context.publish(args, role="scheduler")
            backends = utils.resolve_linear_attn_backends(prefill_default=run.get("prefill_default"))
        else:
            utils.initialize_linear_attn_config(args)
            backends = None
        out["chosen"] = chosen(utils, backends)
        runner = model_runner(args, backends)
        backend = importlib.import_module(BACKEND).GDNAttnBackend(runner)
    except Exception as exc:
        out["error"] = describe(exc)
        return out
    dispatcher = backend.kernel_dispatcher
    out["extend"] = type(dispatcher.extend_kernel).__name__
    out["verify"] = type(dispatcher.verify_kernel).__name__
    out["runner_prefill"] = chosen(utils, runner.linear_attn_backends)["prefill"]
    return out


def chosen(utils: Any, backends: Any) -> dict[str, str]:
    if backends is not None:
        return {"prefill": backends.prefill.value, "decode": backends.decode.value}
    return {
        "prefill": utils.get_linear_attn_prefill_backend().value,
        "decode": utils.get_linear_attn_decode_backend().value,
    }


def failure_cache() -> list[dict[str, Any]]:
    from jitguard.config import Settings
    from jitguard.integrations import sglang as plugin
    from jitguard.state.failure_cache import FailureCache

    fingerprint = plugin.guard().facts.get().fingerprint
    return [
        {"module": r.module, "codes": list(r.codes), "this_fingerprint": r.fingerprint == fingerprint}
        for r in FailureCache(Settings.from_env().cache_dir).entries()
    ]


def record_pass() -> str:
    """What a start whose proof passed leaves behind: a pass under this start's key."""
    from jitguard.config import Settings
    from jitguard.integrations import sglang as plugin
    from jitguard.integrations.proof import proof_key
    from jitguard.state.proof_passes import ProofPasses

    key = proof_key(plugin.guard())
    ProofPasses(Settings.from_env().cache_dir).record("linear-attn-prefill", key)
    return key


def main(spec: dict[str, Any]) -> dict[str, Any]:
    logging.basicConfig(level=logging.INFO)  # as SGLang configures the root logger in each of its processes
    if spec.get("torch_build"):
        torch_metadata(spec["torch_build"])
    import sglang
    from sglang.srt.plugins import load_plugins

    from jitguard.integrations import sglang as plugin
    from jitguard.integrations.sglang import PHASE_CHOICES

    load_plugins()  # SGLang's own loader: the entry point, then HookRegistry.apply_hooks()
    on_a_gpu()
    result: dict[str, Any] = {"sglang": sglang.__version__, "registered": plugin.is_registered()}
    if spec.get("record_pass"):
        result["recorded_key"] = record_pass()
    model = qwen3_next(Path(tempfile.mkdtemp(prefix="qwen3next-")))
    result["runs"] = [start(model, run) for run in spec["runs"]]
    status = plugin.guard().gdn()
    blocking = [f.code for f in status.findings if f.severity == "error"]
    result["status"] = {"usable": status.usable, "blocking": blocking}
    result["proven"] = plugin.guard().is_proven(PHASE_CHOICES["prefill"])
    result["failure_cache"] = failure_cache()
    return result


if __name__ == "__main__":
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    outcome = main(json.loads(sys.argv[1]))
    sys.stdout.flush()
    print("RESULT " + json.dumps(outcome), flush=True)
