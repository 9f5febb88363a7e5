"""Runs inside an SGLang test environment (.ci/install_sglang.sh): the REAL code of one SGLang release, with
jitguard's plugin loaded by SGLang's own ``load_plugins()`` and its hooks applied by SGLang's ``HookRegistry``.

Usage: ``python sglang_scenario.py SPEC_JSON``; prints SGLang's and jitguard's log lines, then one
``RESULT {json}`` line. For each entry of ``runs`` it does what an SGLang engine start does with the options:
a real ``ServerArgs`` for a small Qwen3-Next config (built, resolved, pickled to the "scheduler" as
multiprocessing does), then, scheduler side, SGLang's own linear-attention choice:
``resolve_linear_attn_backends(prefill_default)`` as the attention registry calls it (0.5.18+), or
``initialize_linear_attn_config(server_args)`` and the getters the GDN backend reads (0.5.11-0.5.17). SPEC keys:

- ``runs``: ``[{"options": {ServerArgs field: value}, "prefill_default": "flashinfer" | null}]``;
  ``prefill_default`` is what SGLang's ``flashinfer_gdn_prefill_default(runner)`` answers on a GPU of its
  validated domain (it reads the model runner's GPU and memory pools, which a CPU has not).
- ``sglang_gpu``: "sm100" makes SGLang's own hardware probes say Blackwell (its ``override_platform`` from
  0.5.19, its ``is_sm100_supported`` probe before), so SGLang takes its SM100 defaults. jitguard's facts come
  from its own probes of the caller's environment (an ``nvidia-smi`` stand-in, the linker, ...).
- ``torch_build``: the version the torch package's metadata reports (e.g. "2.11.0+cu130", SGLang's CUDA
  torch); this venv's torch is the CPU build. The torch module itself is untouched.
- ``failure``: a finding code recorded in jitguard's real failure cache for FlashInfer GDN before SGLang starts.
- ``build_hook``: import FlashInfer's JIT core at the end and report whether jitguard's build hook took it.
"""

from __future__ import annotations

import json
import os
import pickle
import sys
import tempfile
from pathlib import Path
from typing import Any

UTILS = "sglang.srt.layers.attention.linear.utils"
PHASES = ("prefill", "decode", "verify")


def torch_metadata(version: str) -> None:
    """Put a torch .dist-info reporting ``version`` first on sys.path (tests/lib/fake_dists.py)."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "lib"))
    from fake_dists import make_dist

    site = Path(tempfile.mkdtemp(prefix="torch-metadata-"))
    make_dist(site, "torch", version)
    sys.path.insert(0, str(site))


def qwen3_next(directory: Path) -> str:
    """The small Qwen3-Next config the vLLM tests serve (GDN heads of the real model), written by transformers."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "vllm"))
    from scenario import qwen3_next_config  # tests/real/vllm/scenario.py

    return str(qwen3_next_config(directory))


def server_args(model: str, options: dict[str, Any], gpu: str | None) -> Any:
    """A real, resolved ServerArgs as the launcher hands it to a scheduler process."""
    import sglang.srt.runtime_context as context
    import sglang.srt.server_args as module

    sm100 = gpu == "sm100"
    kwargs = {"model_path": model, "device": "cpu", "skip_tokenizer_init": True, "disable_radix_cache": True}
    if hasattr(context, "override_platform"):  # 0.5.19+: SGLang's own way to say what the machine is
        with context.override_platform(is_sm100=sm100):
            args = module.ServerArgs(**kwargs, **options)
            args.resolve_once()
    else:
        probe = module.is_sm100_supported
        module.is_sm100_supported = lambda *a, **k: sm100
        try:
            args = module.ServerArgs(**kwargs, **options)
        finally:
            module.is_sm100_supported = probe
    return pickle.loads(pickle.dumps(args))


def sglang_choice(model: str, run: dict[str, Any], gpu: str | None) -> dict[str, Any]:
    """The scheduler side of one engine start: SGLang's choice as stock SGLang makes it, and as it stands."""
    import importlib

    import sglang.srt.runtime_context as context

    args = server_args(model, run.get("options", {}), gpu)
    utils = importlib.import_module(UTILS)
    out: dict[str, Any] = {"error": None}
    if hasattr(utils, "resolve_linear_attn_backends"):
        context.publish(args, role="scheduler")
        resolve = utils.resolve_linear_attn_backends  # looked up at call time, as the attention registry does
        original = getattr(resolve, "__wrapped__", resolve)
        stock = original(prefill_default=run.get("prefill_default"))
        out["stock"] = {p: getattr(stock, p).value for p in PHASES}
        try:
            now = resolve(prefill_default=run.get("prefill_default"))
            out["backends"] = {p: getattr(now, p).value for p in PHASES}
        except Exception as exc:
            out["error"] = describe(exc)
        return out
    initialize = utils.initialize_linear_attn_config
    getattr(initialize, "__wrapped__", initialize)(args)
    out["stock"] = read_process_wide(utils)
    try:
        initialize(args)
        out["backends"] = read_process_wide(utils)
    except Exception as exc:
        out["error"] = describe(exc)
    return out


def read_process_wide(utils: Any) -> dict[str, str]:
    # What the GDN backend reads when it is built.
    return {
        "prefill": utils.get_linear_attn_prefill_backend().value,
        "decode": utils.get_linear_attn_decode_backend().value,
    }


def describe(exc: BaseException) -> dict[str, Any]:
    return {
        "type": type(exc).__name__,
        "bases": [c.__name__ for c in type(exc).__mro__],
        "message": str(exc),
        "codes": [f.code for f in getattr(exc, "findings", ())],
    }


def jitguard_hooks() -> list[dict[str, Any]]:
    """The hooks in SGLang's HookRegistry that SGLang attributes to the plugin named jitguard."""
    from sglang.srt.plugins.hook_registry import HookRegistry

    return [
        {"target": target, "type": kind.value, "applied": target in HookRegistry._patched}
        for target, hooks in HookRegistry._hooks.items()
        for kind, _hook, source in hooks
        if source is not None and source.plugin_name == "jitguard"
    ]


def record_failure(code: str) -> None:
    """What a failed FlashInfer GDN build leaves behind: an entry in jitguard's real failure cache."""
    from jitguard.findings.catalog import make
    from jitguard.gdn.dispatch import dispatcher

    d = dispatcher()
    finding = make(code, backend="flashinfer", evidence=["recorded by tests/real/sglang/sglang_scenario.py"])
    d.environment.record_failure(d.backends["flashinfer"], [finding], None)


def main(spec: dict[str, Any]) -> dict[str, Any]:
    if spec.get("torch_build"):
        torch_metadata(spec["torch_build"])
    if spec.get("failure"):
        record_failure(spec["failure"])

    import sglang
    from sglang.srt.plugins import load_plugins

    from jitguard.integrations import sglang as plugin

    load_plugins()  # SGLang's own loader: the entry point, then HookRegistry.apply_hooks()
    result: dict[str, Any] = {"sglang": sglang.__version__, "registered": plugin.is_registered()}
    result["hooks"] = jitguard_hooks()
    model = qwen3_next(Path(tempfile.mkdtemp(prefix="qwen3next-")))
    result["runs"] = []
    for run in spec["runs"]:
        outcome = sglang_choice(model, run, spec.get("sglang_gpu"))
        outcome["looks"] = plugin.guard().looks
        result["runs"].append(outcome)
    if plugin.guard().looks:
        status = plugin.guard().gdn()
        result["status"] = {
            "usable": status.usable,
            "codes": [f.code for f in status.findings],
            "blocking": [f.code for f in status.findings if f.severity == "error"],
        }
    if spec.get("build_hook"):
        import flashinfer.jit.core  # noqa: F401  (what the first FlashInfer JIT build in the engine imports)

        from jitguard.integrations import flashinfer_hook

        result["build_hook_active"] = flashinfer_hook.is_active()
    return result


if __name__ == "__main__":
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    outcome = main(json.loads(sys.argv[1]))
    sys.stdout.flush()
    print("RESULT " + json.dumps(outcome), flush=True)
