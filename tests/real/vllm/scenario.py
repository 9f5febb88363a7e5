"""Runs inside a vLLM test environment (.ci/install_vllm.sh): the REAL vLLM code of one release, loaded the
way vLLM loads it, with jitguard's plugin registered by vLLM's own ``load_general_plugins()``.

Usage: ``python scenario.py SPEC_JSON``; prints vLLM's and jitguard's log lines, then one ``RESULT {json}``
line. SPEC keys:

- ``requests``: the ``--gdn-prefill-backend`` values to build layers with, in order ("auto" = not given).
- ``layers``: how many GDN prefill ops (``ChunkGatedDeltaRule``, one per GDN layer) to build per request.
- ``torch_build``: stand in for the torch package fact (e.g. "2.11.0+cu130", the H200 host's torch); the
  rest of the facts come from this machine's real probes (nvidia-smi, the linker, ...) under the caller's
  environment. Without it the plugin's default status provider runs unchanged.
- ``failure``: a finding code recorded in jitguard's real failure cache for FlashInfer GDN before vLLM starts.
- ``build_hook``: import FlashInfer's JIT core at the end and report whether jitguard's build hook took it.
- ``block``: modules made unimportable before anything else (tests/lib/breakage.py), e.g. ``["elftools"]``.
- ``inject``: ``[probe, "raise" | "hang"]``: one of jitguard's fact probes broken on purpose.
- ``warmup``: after building each request's ops, run vLLM's own ``_warmup_prefill_kernels`` (0.18+) once per
  op, as its profile run does, on a stand-in of the GDN attention layer that holds the real op (see
  ``warm_up``; 0.17, which has none, runs the profile run's ``_forward_core``, where jitguard proves the op:
  ``profile_run``); the facts with the torch stand-in then become the process's facts, so the failure cache is
  keyed on the same fingerprint the status uses.

The one part that cannot be real here is the GPU: vLLM's GDN layer module gets a CUDA SM90 platform object
(vLLM's own ``Platform`` class, capability 9.0) in place of ``current_platform``, so vLLM's real selection
code takes the branch it takes on an H200, and torch's device queries answer as an H200's driver would
(``h200_device_queries``). The rest of vLLM (config, CustomOp, the layer module) is real, and so is the
FlashInfer it imports: the flashinfer-python and nvidia-cutlass-dsl the release pins (RESULT's ``flashinfer``
says which version this process saw).
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

CURRENT = "vllm.model_executor.layers.mamba.gdn.qwen_gdn_linear_attn"
SPRING_2026 = "vllm.model_executor.layers.mamba.gdn_linear_attn"
MODEL_FILE = "vllm.model_executor.models.qwen3_next"  # 0.17-0.18


def sm90_platform() -> Any:
    from vllm.platforms.interface import DeviceCapability, Platform, PlatformEnum

    class Hopper(Platform):
        _enum = PlatformEnum.CUDA
        device_name = "cuda"
        device_type = "cuda"
        dispatch_key = "CUDA"

        @classmethod
        def get_device_capability(cls, device_id: int = 0) -> Any:
            return DeviceCapability(9, 0)

        @classmethod
        def get_cuda_runtime_major(cls) -> int:
            return 13

        @classmethod
        def num_compute_units(cls, device_id: int = 0) -> int:
            return 132  # an H200's SMs

    return Hopper()


def h200_device_queries() -> None:
    """torch's device queries answered as on an H200 (this machine has no GPU, and its torch may be the CPU
    build): FlashInfer 0.6.15-0.6.18 asks for the device's properties when its package is imported
    (``flashinfer/gdn_kernels``), which the CPU build refuses with an AssertionError FlashInfer does not catch;
    on a real H200 host the same import succeeds."""
    import types

    import torch

    properties = types.SimpleNamespace(
        name="NVIDIA H200", major=9, minor=0, multi_processor_count=132, total_memory=143771 << 20
    )
    torch.cuda.get_device_properties = lambda *args, **kwargs: properties
    torch.cuda.get_device_capability = lambda *args, **kwargs: (9, 0)


def flashinfer_version() -> str | None:
    import importlib.metadata

    try:
        return importlib.metadata.version("flashinfer-python")
    except importlib.metadata.PackageNotFoundError:
        return None


def facts_with_torch(build: str) -> Any:
    """This machine's real facts, except that torch is the given build (this venv's torch is the CPU one)."""
    from jitguard.config import Settings
    from jitguard.facts import collect, fingerprint
    from jitguard.facts.packages import PackageFacts, PackageInfo

    facts = collect(cache_dir=Settings.from_env().cache_dir)
    pkgs = facts.packages
    others = tuple(p for p in pkgs.installed if p.name != "torch")
    packages = PackageFacts(installed=(*others, PackageInfo("torch", build, None)), missing=pkgs.missing)
    parts = {f.name: getattr(facts, f.name) for f in dataclasses.fields(facts) if f.name != "fingerprint"}
    parts["packages"] = packages
    return dataclasses.replace(facts, packages=packages, fingerprint=fingerprint.compute(**parts))


def qwen3_next_config(directory: Path) -> Path:
    """A small Qwen3-Next config.json (GDN heads of the real model: K = V = 128), written by transformers."""
    from transformers import Qwen3NextConfig

    config = Qwen3NextConfig(
        hidden_size=256,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        intermediate_size=512,
        linear_num_key_heads=2,
        linear_num_value_heads=4,
        linear_key_head_dim=128,
        linear_value_head_dim=128,
        vocab_size=1024,
        num_experts=4,
        num_experts_per_tok=2,
        moe_intermediate_size=128,
        shared_expert_intermediate_size=128,
    )
    config.architectures = ["Qwen3NextForCausalLM"]
    config.save_pretrained(directory)
    return directory


def break_jitguard(spec: dict[str, Any]) -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "lib"))  # tests/lib, for breakage.py
    import breakage

    if spec.get("block"):
        breakage.block(spec["block"])
    if spec.get("inject"):
        breakage.inject(*spec["inject"])


def main(spec: dict[str, Any]) -> dict[str, Any]:
    break_jitguard(spec)
    h200_device_queries()
    import vllm
    from vllm.plugins import load_general_plugins

    from jitguard.integrations import vllm as plugin

    result: dict[str, Any] = {"vllm": vllm.__version__, "status_calls": 0, "flashinfer": flashinfer_version()}
    load_general_plugins()  # vLLM's own loader: finds jitguard's entry point and calls register()
    result["registered"] = plugin.is_registered()

    if spec.get("failure"):
        record_failure(spec["failure"], spec.get("torch_build"))
    base = plugin.default_status
    if spec.get("torch_build"):
        from jitguard.gdn.dispatch import backend_status

        facts = facts_with_torch(spec["torch_build"])

        def base() -> Any:
            return backend_status("flashinfer", facts=facts)

    def counted() -> Any:
        result["status_calls"] += 1
        return base()

    if result["registered"]:
        keyed = (lambda: facts) if spec.get("warmup") and spec.get("torch_build") else None
        plugin.register(status=counted, facts=keyed)

    for layout, name in (("current", CURRENT), ("spring-2026", SPRING_2026), ("model-file", MODEL_FILE)):
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name and name.startswith(exc.name):
                continue
            raise
        if layout == "current" or "ChunkGatedDeltaRule" in module.__dict__:
            break
    result["layout"] = layout
    if layout == "current":
        result["hooked"] = hasattr(module._resolve_gdn_prefill_backend, "__jitguard_original__")
    else:
        result["hooked"] = hasattr(module.ChunkGatedDeltaRule.__init__, "__jitguard_original__")
    module.current_platform = sm90_platform()

    from vllm.config import DeviceConfig, ModelConfig, VllmConfig, set_current_vllm_config

    model = ModelConfig(
        model=str(qwen3_next_config(Path(tempfile.mkdtemp(prefix="qwen3next-")))),
        skip_tokenizer_init=True,
        dtype="bfloat16",
    )
    result["runs"] = []
    for requested in spec["requests"]:
        extra = {} if requested == "auto" else {"gdn_prefill_backend": requested}
        config = VllmConfig(
            model_config=model, device_config=DeviceConfig(device="cpu"), additional_config=extra
        )
        run: dict[str, Any] = {"requested": requested, "layers": [], "error": None}
        if result["layout"] == "current":
            resolve = module._resolve_gdn_prefill_backend
            run["vllm_choice"] = list(getattr(resolve, "__jitguard_original__", resolve)(config))
        try:
            with set_current_vllm_config(config):
                ops = []
                for _ in range(spec.get("layers", 1)):
                    op = module.ChunkGatedDeltaRule()
                    ops.append(op)
                    flashinfer = op._forward_method == op.forward_cuda
                    run["layers"].append("flashinfer" if flashinfer else "triton")
                    if hasattr(op, "gdn_prefill_backend"):
                        assert op.gdn_prefill_backend == run["layers"][-1], op.gdn_prefill_backend
                if spec.get("warmup"):
                    run["warmed"] = warm_up(module, ops)
            if result["layout"] == "current":
                run["resolver"] = list(module._resolve_gdn_prefill_backend(config))
        except Exception as exc:  # the test asserts on what it was
            run["error"] = {"type": type(exc).__name__, "bases": [c.__name__ for c in type(exc).__mro__]}
            run["error"]["message"] = str(exc)
            run["error"]["codes"] = [f.code for f in getattr(exc, "findings", ())]
        run["status_calls"] = result["status_calls"]
        result["runs"].append(run)
    if spec.get("build_hook"):
        import flashinfer.jit.core  # what the first FlashInfer JIT build in the engine imports

        from jitguard.integrations import flashinfer_hook

        result["build_hook_active"] = flashinfer_hook.is_active()
    if result["status_calls"] and not (spec.get("inject") and spec["inject"][1] == "hang"):
        from jitguard.decision.engine_verdicts import GDN_PREFILL

        status = plugin.guard().gdn()
        result["proven"] = plugin.guard().is_proven(GDN_PREFILL)
        result["status"] = {
            "usable": status.usable,
            "codes": [f.code for f in status.findings],
            "blocking": [f.code for f in status.findings if f.severity == "error"],
        }
    if spec.get("warmup"):
        from jitguard.config import Settings
        from jitguard.state.failure_cache import FailureCache

        key = plugin.guard().facts.get().fingerprint
        result["failure_cache"] = [
            {"module": r.module, "codes": list(r.codes), "this_fingerprint": r.fingerprint == key}
            for r in FailureCache(Settings.from_env().cache_dir).entries()
            if r.failed
        ]
    return result


def warm_up(module: Any, ops: list[Any]) -> list[str]:
    """vLLM's own ``_warmup_prefill_kernels`` (as patched by jitguard) once per op, as the profile run calls it
    for each GDN layer; the backend each op runs after it. The layer is a stand-in holding only what the
    warmup reads (the real one builds tensor-parallel projections), the real ``ChunkGatedDeltaRule`` op among
    it; vLLM's Triton q/k/v preparation (``fused_post_conv_prep``, no CPU kernel) is replaced by tensors of its
    output's shapes. The op's call is the real one: FlashInfer's GDN prefill, which fails on this GPU-less
    machine whatever jitguard's pre-flight said."""
    import torch

    classes = [c for c in vars(module).values() if isinstance(c, type) and c.__module__ == module.__name__]
    warming = [c for c in classes if "_warmup_prefill_kernels" in c.__dict__]
    if not warming:  # 0.17: no warmup; the profile run's first _forward_core, where jitguard proves the op
        return profile_run(module, next(c for c in classes if "_forward_core" in c.__dict__), ops)
    cls = warming[0]
    heads, dim, chunk = 2, 128, 64
    warm = cls.__dict__["_warmup_prefill_kernels"]
    # 0.18-0.21 ask whether the layer has the flag at all (hasattr); 0.22+ set it False in __init__.
    code = getattr(warm, "__jitguard_original__", warm).__code__
    has_flag = "hasattr" not in code.co_names
    v_dim = (0,) if code.co_argcount > 2 else ()  # 0.21+: (qkv_or_qkvz, v_dim); 0.18-0.20: (mixed_qkv)

    def prep(conv_output: Any, a: Any, b: Any, **kwargs: Any) -> Any:
        t = conv_output.shape[0]
        qkv = [torch.randn(t, heads, dim) for _ in range(3)]
        return (*qkv, torch.zeros(t, heads), torch.ones(t, heads))

    module.fused_post_conv_prep = prep
    accelerator = getattr(torch, "accelerator", None)
    if accelerator is not None:  # the warmup frees the GPU's cache at its end; there is none here
        accelerator.empty_cache = lambda: None
    found = []
    for i, op in enumerate(ops):
        layer = cls.__new__(cls)
        torch.nn.Module.__init__(layer)
        layer.chunk_gated_delta_rule = op
        values = dict(
            prefix=f"model.layers.{i}.linear_attn",
            _exports_checkpoints=False,
            num_k_heads=heads,
            num_v_heads=heads,
            tp_size=1,
            head_k_dim=dim,
            head_v_dim=dim,
            A_log=torch.zeros(heads),
            dt_bias=torch.zeros(heads),
            gdn_prefill_backend=getattr(op, "gdn_prefill_backend", None),
            get_state_dtype=lambda: (torch.bfloat16, torch.float32),
        )
        if has_flag:
            values["_prefill_kernels_warmed_up"] = False
        for name, value in values.items():
            object.__setattr__(layer, name, value)
        layer._warmup_prefill_kernels(torch.zeros(chunk, 3 * heads * dim), *v_dim)
        found.append("flashinfer" if op._forward_method == op.forward_cuda else "triton")
    return found


def profile_run(module: Any, cls: type, ops: list[Any]) -> list[str]:
    """vLLM 0.17's profile run through each GDN layer: ``_forward_core`` (as patched by jitguard) with no
    attention metadata, where vLLM itself returns at once; the backend each op runs after it. The layer is a
    stand-in holding what jitguard's proof reads, the real op among it, and the profile run's forward context
    is one without attention metadata."""
    import types

    import torch

    heads, dim, chunk = 2, 128, 64
    module.get_forward_context = lambda: types.SimpleNamespace(attn_metadata=None)
    found = []
    for i, op in enumerate(ops):
        layer = cls.__new__(cls)
        torch.nn.Module.__init__(layer)
        layer.chunk_gated_delta_rule = op
        values = dict(
            prefix=f"model.layers.{i}.linear_attn",
            num_k_heads=heads,
            num_v_heads=heads,
            tp_size=1,
            head_k_dim=dim,
            head_v_dim=dim,
            get_state_dtype=lambda: (torch.bfloat16, torch.float32),
        )
        for name, value in values.items():
            object.__setattr__(layer, name, value)
        mixed_qkv = torch.zeros(chunk, 3 * heads * dim, dtype=torch.bfloat16)
        b, a = torch.zeros(chunk, heads), torch.zeros(chunk, heads)
        layer._forward_core(mixed_qkv, b, a, torch.zeros(chunk, heads, dim))
        found.append("flashinfer" if op._forward_method == op.forward_cuda else "triton")
    return found


def record_failure(code: str, torch_build: str | None) -> None:
    from jitguard.config import Settings
    from jitguard.findings.catalog import make
    from jitguard.gdn.backends.flashinfer import MODULE
    from jitguard.state.failure_cache import FailureCache

    assert MODULE is not None
    facts = facts_with_torch(torch_build) if torch_build else None
    if facts is None:
        from jitguard.facts import collect

        facts = collect(cache_dir=Settings.from_env().cache_dir)
    finding = make(code, backend="flashinfer", evidence=["recorded by tests/real/vllm/scenario.py"])
    FailureCache(Settings.from_env().cache_dir).record_failure(MODULE, facts.fingerprint, [finding])


if __name__ == "__main__":
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    outcome = main(json.loads(sys.argv[1]))
    sys.stdout.flush()
    print("RESULT " + json.dumps(outcome), flush=True)
