"""Runs inside a vLLM test environment (.ci/install_vllm.sh): vLLM's REAL choices of FlashInfer beyond GDN
prefill (the top-k/top-p sampler, the attention backend and its FP8 KV cache, the has_flashinfer gates),
with jitguard's plugin registered by vLLM's own ``load_general_plugins()``.

Usage: ``python choices_scenario.py SPEC_JSON``; prints vLLM's and jitguard's log lines, then one
``RESULT {json}`` line. SPEC keys (all optional):

- ``torch_build``: stand in for the torch package fact (the H200 host's CUDA torch; this venv's is the CPU
  build); the rest of the facts come from this machine's real probes under the caller's environment.
- ``failures``: FlashInfer module names (e.g. ``["sampling"]``) recorded as failed in jitguard's real failure
  cache under this environment's fingerprint, the way the build hook records a failed build.
- ``sampler``: modes to build vLLM's real ``TopKTopPSampler`` in (0.17 - 0.33; 0.34 removed it with the V1
  model runner), and to ask the V2 model runner's sampler module (0.23+) whether it uses FlashInfer:
  ``default`` (VLLM_USE_FLASHINFER_SAMPLER unset), ``named`` (=1), ``off`` (=0). Also jitguard's first-use
  fallback run on this release's own sampling functions.
- ``attention``: ``[selected, kv_cache_dtype]`` pairs for vLLM's real ``get_attn_backend_cls`` on a
  Blackwell (SM100) platform, where FlashInfer is first in vLLM's priority list; selected ``auto`` or a name.
- ``gates``: modes for the has_flashinfer predicates: ``default``, or ``moe-named`` (a current vLLM config
  with ``moe_backend="flashinfer_cutlass"``).

Stand-ins, only for what a GPU-less machine cannot have: the GPU (vLLM's ``Platform`` with capability 9.0 or
10.0, 132 SMs, device index 0; torch's device queries answered as an H200's) and vLLM's compiled extensions
(``vllm._C``: empty modules, so the real ``vllm.platforms.cuda`` selection code imports). vLLM's FlashInfer
attention backend is its real module, importing the real flashinfer-python (and nvidia-cutlass-dsl) the release
pins.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
import types
from typing import Any

import scenario  # tests/real/vllm/scenario.py: the GPU stand-in and the facts with a CUDA torch

ATTENTION_MODULE = "vllm.v1.attention.backends.flashinfer"
V2_SAMPLER = "vllm.v1.worker.gpu.sample.sampler"  # the V2 model runner's sampler (0.23+)
V2_NAMES = ("flashinfer_sampler_supported", "flashinfer_sample")
V1_SAMPLER = "TopKTopPSampler"  # the V1 model runner's sampler (0.17 - 0.33)
COMPILED = ("vllm._C", "vllm._C_stable_libtorch", "vllm._moe_C", "vllm.cumem_allocator")


def stand_in_compiled_extensions() -> None:
    for name in COMPILED:
        sys.modules.setdefault(name, types.ModuleType(name))


def record_failures(modules: list[str], torch_build: str | None) -> None:
    from jitguard.config import Settings
    from jitguard.facts import collect
    from jitguard.findings.catalog import make
    from jitguard.state.failure_cache import FailureCache

    facts = scenario.facts_with_torch(torch_build) if torch_build else collect()
    cache = FailureCache(Settings.from_env().cache_dir)
    for module in modules:
        finding = make("build-failed", backend="flashinfer", evidence=["recorded by choices_scenario.py"])
        cache.record_failure(module, facts.fingerprint, [finding], source_digest="choices-scenario")


def error_of(exc: BaseException) -> dict[str, Any]:
    return {
        "type": type(exc).__name__,
        "bases": [c.__name__ for c in type(exc).__mro__],
        "message": str(exc),
        "codes": [f.code for f in getattr(exc, "findings", ())],
    }


def sampler_variable(mode: str) -> None:
    """VLLM_USE_FLASHINFER_SAMPLER for ``mode``: unset (default), 1 (named), 0 (off)."""
    os.environ.pop("VLLM_USE_FLASHINFER_SAMPLER", None)
    if mode != "default":
        os.environ["VLLM_USE_FLASHINFER_SAMPLER"] = "1" if mode == "named" else "0"


def run_sampler(modes: list[str]) -> list[dict[str, Any]]:
    import torch

    sampler = importlib.import_module("vllm.v1.sample.ops.topk_topp_sampler")  # patched on import
    sampler.current_platform = scenario.sm90_platform()
    torch.accelerator.current_device_index = lambda: 0  # the GPU stand-in (0.33+ ask for its SM count)
    if not hasattr(sampler, V1_SAMPLER):
        return []  # 0.34+: the V2 runner's Sampler alone decides (run_sampler_v2)
    runs = []
    for mode in modes:
        sampler_variable(mode)
        run: dict[str, Any] = {"mode": mode, "forward": None, "error": None}
        try:
            forward = sampler.TopKTopPSampler().forward
            run["forward"] = getattr(getattr(forward, "__wrapped__", forward), "__func__", forward).__name__
        except Exception as exc:
            run["error"] = error_of(exc)
        runs.append(run)
    os.environ.pop("VLLM_USE_FLASHINFER_SAMPLER", None)
    return runs


def run_sampler_v2(modes: list[str]) -> dict[str, Any]:
    """The V2 model runner's sampler module (0.23+): its ``flashinfer_sampler_supported``, imported by name
    from topk_topp_sampler, asked in each mode (what ``Sampler.__init__`` keeps as ``use_flashinfer``)."""
    try:
        v2 = importlib.import_module(V2_SAMPLER)
    except ImportError as exc:
        return {"present": False, "why": str(exc)}
    if not all(hasattr(v2, n) for n in V2_NAMES):
        return {"present": False, "why": f"{V2_SAMPLER} does not use FlashInfer's sampler in this release"}
    runs = []
    for mode in modes:
        sampler_variable(mode)
        run: dict[str, Any] = {"mode": mode, "use_flashinfer": None, "error": None}
        try:
            run["use_flashinfer"] = v2.flashinfer_sampler_supported()
        except Exception as exc:
            run["error"] = error_of(exc)
        runs.append(run)
    os.environ.pop("VLLM_USE_FLASHINFER_SAMPLER", None)
    return {
        "present": True,
        "runs": runs,
        "guarded": {n: hasattr(getattr(v2, n), "__jitguard_original__") for n in V2_NAMES},
    }


def run_native_sample() -> dict[str, Any]:
    """jitguard's first-use fallback with this release's own functions (apply_top_k_top_p, random_sample):
    one token per row, each among its row's top k."""
    import torch

    from jitguard.integrations.vllm.sampler import native_sample

    module = importlib.import_module("vllm.v1.sample.ops.topk_topp_sampler")
    torch.manual_seed(0)
    logits = torch.randn(4, 64)
    before = logits.clone()
    k = torch.tensor([3, 3, 3, 3])
    tokens = native_sample(module, logits, k, torch.tensor([0.9] * 4), {})
    top = logits.topk(3, dim=-1).indices
    return {
        "shape": list(tokens.shape),
        "in_top_k": all(int(t) in top[i].tolist() for i, t in enumerate(tokens)),
        "logits_untouched": bool(torch.equal(logits, before)),
    }


def run_attention(requests: list[list[str]]) -> list[dict[str, Any]]:
    import torch
    from vllm.platforms import cuda
    from vllm.platforms.interface import DeviceCapability
    from vllm.v1.attention.backends.registry import AttentionBackendEnum
    from vllm.v1.attention.selector import AttentionSelectorConfig

    class Blackwell(cuda.CudaPlatformBase):  # type: ignore[misc,name-defined]
        @classmethod
        def get_device_capability(cls, device_id: int = 0) -> Any:
            return DeviceCapability(10, 0)

    runs = []
    for selected, kv in requests:
        run: dict[str, Any] = {"selected": selected, "kv_cache_dtype": kv, "backend": None, "error": None}
        config = AttentionSelectorConfig(
            head_size=128, dtype=torch.bfloat16, kv_cache_dtype=kv, block_size=None
        )
        backend = None if selected == "auto" else AttentionBackendEnum[selected]
        try:
            with current_config(attention=backend):
                path = Blackwell.get_attn_backend_cls(backend, config)
            run["backend"] = path.rsplit(".", 1)[-1]
        except Exception as exc:
            run["error"] = error_of(exc)
        runs.append(run)
    return runs


def run_gates(modes: list[str]) -> list[dict[str, Any]]:
    gates = importlib.import_module("vllm.utils.flashinfer")  # patched on import
    runs = []
    for mode in modes:
        run: dict[str, Any] = {"mode": mode, "answers": {}, "error": None}
        try:
            with current_config(moe="flashinfer_cutlass" if mode == "moe-named" else None):
                for name in ("has_flashinfer", "has_flashinfer_moe", "has_flashinfer_cutlass_fused_moe"):
                    run["answers"][name] = getattr(gates, name)()
        except Exception as exc:
            run["error"] = error_of(exc)
        runs.append(run)
    return runs


class current_config:
    """vLLM's current config with the attention backend and MoE backend a user would name (no model)."""

    def __init__(self, *, attention: Any = None, moe: str | None = None) -> None:
        from vllm.config import (
            AttentionConfig,
            DeviceConfig,
            KernelConfig,
            VllmConfig,
            set_current_vllm_config,
        )

        kernel = KernelConfig(moe_backend=moe) if moe else KernelConfig()
        config = VllmConfig(
            device_config=DeviceConfig(device="cpu"),
            attention_config=AttentionConfig(backend=attention),
            kernel_config=kernel,
        )
        self._context = set_current_vllm_config(config)

    def __enter__(self) -> None:
        self._context.__enter__()

    def __exit__(self, *exc: Any) -> None:
        self._context.__exit__(*exc)


def main(spec: dict[str, Any]) -> dict[str, Any]:
    scenario.h200_device_queries()
    import vllm
    from vllm.plugins import load_general_plugins

    from jitguard.integrations import vllm as plugin

    result: dict[str, Any] = {"vllm": vllm.__version__, "flashinfer": scenario.flashinfer_version()}
    stand_in_compiled_extensions()
    # Imported before the plugin, as vLLM's platform code may import it first: patched at once by register().
    importlib.import_module(ATTENTION_MODULE)
    load_general_plugins()
    result["registered"] = plugin.is_registered()
    if spec.get("torch_build") and result["registered"]:
        facts = scenario.facts_with_torch(spec["torch_build"])
        plugin.register(facts=lambda: facts)
    if spec.get("failures"):
        record_failures(spec["failures"], spec.get("torch_build"))
    result["sampler"] = run_sampler(spec.get("sampler", []))
    result["sampler_v2"] = run_sampler_v2(spec.get("sampler", []))
    result["native_sample"] = run_native_sample()
    result["attention"] = run_attention(spec.get("attention", []))
    result["gates"] = run_gates(spec.get("gates", []))
    backend = sys.modules[ATTENTION_MODULE].FlashInferBackend
    sampler = sys.modules["vllm.v1.sample.ops.topk_topp_sampler"]
    v1 = getattr(sampler, V1_SAMPLER, None)
    result["hooked"] = {
        # the V1 sampler where the release has it (0.34+: the predicate, asked by the V2 runner)
        "sampler": hasattr(
            v1.__init__ if v1 is not None else sampler.flashinfer_sampler_supported, "__jitguard_original__"
        ),
        "attention": hasattr(backend.validate_configuration, "__jitguard_original__"),
        "gates": hasattr(sys.modules["vllm.utils.flashinfer"].has_flashinfer, "__jitguard_original__"),
    }
    if result["registered"]:
        from jitguard.decision.engine_verdicts import CHOICES

        statuses = {}
        for choice in CHOICES:  # GDN prefill's too: the era contrast (the others are nvcc JIT in every era)
            status = plugin.guard().status(choice)
            statuses[choice.key] = {
                "usable": status.usable,
                "blocking": [f.code for f in status.blocking],
                "codes": [f.code for f in status.findings],
            }
        result["statuses"] = statuses
    return result


if __name__ == "__main__":
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    outcome = main(json.loads(sys.argv[1]))
    sys.stdout.flush()
    print("RESULT " + json.dumps(outcome), flush=True)
