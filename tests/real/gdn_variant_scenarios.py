"""Scenarios for tests/real/test_gdn_variant_build.py, each in a fresh process with the REAL flashinfer 0.6.6.

The partial module is made by the real code (FlashInfer's generator, jitguard's routed dispatch unit, FlashInfer's
launcher, the ninja file FlashInfer writes, jitguard's supervised build, the symbol check, the load). Only the
instance translation unit is replaced by a stand-in (one GDN instance takes ~200 s and 6 GiB to compile here):
FlashInfer's own rendered instance file, its explicit instantiation line unchanged, with the kernel header swapped
for the template's declaration (read from FlashInfer's header) and an empty body.

    python gdn_variant_scenarios.py SCENARIO [ARGS...]     (prints one JSON object on its last stdout line)
"""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path
from typing import Any

VARIANT = "bf16_g1b1a1i1"
KERNEL_HEADER = '#include "flashinfer/flat/prefill/prefill_kernel_delta_rule_sm90.cuh"'


def _plan() -> Any:
    from jitguard.gdn_variants.variant_plan import family_for, parse_variant, plan_for

    family = family_for("0.6.6")
    assert family is not None
    return plan_for("0.6.6", [parse_variant(VARIANT, family)])


def stand_in(instance_source: str, *, broken: bool = False) -> str:
    """FlashInfer's instance file with the kernel's template definition replaced by an empty one."""
    from flashinfer.jit import env as jit_env

    header = (
        jit_env.FLASHINFER_INCLUDE_DIR / "flashinfer/flat/prefill/prefill_kernel_delta_rule_sm90.cuh"
    ).read_text()
    found = re.search(
        r"template\s*<[^>]*>\s*void\s+launch_delta_rule_prefill_kernel_gbai\s*\([^)]*\)", header, re.DOTALL
    )
    assert found is not None, "FlashInfer's header no longer declares the instance template as expected"
    definition = (
        "#include <cstdint>\n#include <cuda_runtime_api.h>\n"
        "namespace cutlass::arch { struct Sm90; }\n"
        f"namespace flat {{\n{found.group(0)} {{ /* jitguard test stand-in */ }}\n}}\n"
    )
    if broken:
        definition += "this is not C++\n"
    assert KERNEL_HEADER in instance_source
    return instance_source.replace(KERNEL_HEADER, definition)


def _symbols(so_path: Path) -> dict[str, list[str]]:
    from jitguard.facts.elf import symbols

    defined, undefined = symbols(so_path, containing="launch_delta_rule_prefill_kernel_gbai")
    return {"defined": list(defined), "undefined": list(undefined)}


def build() -> dict[str, Any]:
    """The plan's sources and ninja file from the real generator, then a real supervised build and load."""
    import jitguard

    jitguard.install()
    from flashinfer.jit import env as jit_env
    from flashinfer.jit.gdn import gen_gdn_prefill_sm90_module

    from jitguard.gdn_variants.partial_module import MANIFEST, ROUTED, build_variant_module, prepare_spec
    from jitguard.gdn_variants.variant_plan import plan_for
    from jitguard.state.failure_cache import FailureCache

    plan = _plan()
    spec = prepare_spec(plan)
    generated = Path(jit_env.FLASHINFER_GEN_SRC_DIR)
    full_dir = generated / "gdn_prefill_sm90"
    ours = generated / plan.module
    out: dict[str, Any] = {
        "module": spec.name,
        "sources": [str(Path(s).relative_to(generated)) for s in spec.sources],
        "flashinfer_generated": sorted(p.name for p in full_dir.glob("*.cu")),
        "full_plan_sources": sorted(plan_for("0.6.6").sources),
        "same_instance": (ours / f"gdn_prefill_kernel_{VARIANT}.cu").read_bytes()
        == (full_dir / f"gdn_prefill_kernel_{VARIANT}.cu").read_bytes(),
        "same_launcher": (ours / "gdn_prefill_launcher.cu").read_bytes()
        == (full_dir / "gdn_prefill_launcher.cu").read_bytes(),
        "routed_dispatch": ROUTED in (ours / "prefill_kernel_delta_rule_sm90.cu").read_text(),
        "flags_as_flashinfers": spec.extra_cuda_cflags == gen_gdn_prefill_sm90_module().extra_cuda_cflags,
        "manifest": json.loads((Path(spec.build_dir) / MANIFEST).read_text()),
        "lock_path": str(spec.lock_path),
    }
    spec.write_ninja()
    ninja = Path(spec.ninja_path).read_text()
    out["ninja_compiles"] = sorted(
        re.findall(r"^build \S+/(\S+)\.cuda\.o: cuda_compile", ninja, re.MULTILINE)
    )
    out["ninja_links"] = re.findall(r"^build \S+/(\S+\.so): link", ninja, re.MULTILINE)

    instance = ours / f"gdn_prefill_kernel_{VARIANT}.cu"
    instance.write_text(stand_in(instance.read_text()))
    built = build_variant_module(plan, load=True, spec=spec)
    out["status"] = built.status
    out["so"] = str(built.so_path)
    out["symbols"] = _symbols(built.so_path)
    out["loaded"] = type(built.loaded).__name__
    out["call"] = _call_on_cpu(built.loaded.gdn_prefill)
    out["full_so"] = (Path(jit_env.FLASHINFER_JIT_DIR) / "gdn_prefill_sm90" / "gdn_prefill_sm90.so").exists()
    again = build_variant_module(plan, load=False, spec=spec)
    out["again"] = again.status
    out["cache"] = [
        (r.module, r.outcome) for r in FailureCache(Path(os.environ["JITGUARD_CACHE_DIR"])).entries()
    ]
    log_text = Path(built.log_path).read_text() if built.log_path else ""
    out["log_steps"] = re.findall(r"\[(\d+)/(\d+)\]", log_text)[-1:] if log_text else []
    return out


def broken() -> dict[str, Any]:
    """A partial module that does not compile: classified, cached under the partial module's own name."""
    import jitguard

    jitguard.install()
    from jitguard.errors import BuildFailed
    from jitguard.gdn_variants.partial_module import build_variant_module, prepare_spec
    from jitguard.gdn_variants.variant_plan import falls_back_to_full
    from jitguard.state.failure_cache import FailureCache

    plan = _plan()
    spec = prepare_spec(plan)
    instance = Path(spec.sources[0])
    instance.write_text(stand_in(instance.read_text(), broken=True))
    out: dict[str, Any] = {}
    for attempt in ("first", "second"):
        try:
            build_variant_module(plan, load=False, spec=spec)
            out[attempt] = {"type": None}
        except BuildFailed as exc:
            codes = [f.code for f in exc.findings if f.blocking]
            out[attempt] = {"type": type(exc).__name__, "module": exc.module, "codes": codes}
            out[attempt]["falls_back_to_full"] = falls_back_to_full(codes)
    out["cache"] = [
        (r.module, r.outcome) for r in FailureCache(Path(os.environ["JITGUARD_CACHE_DIR"])).entries()
    ]
    return out


def prebuilt() -> dict[str, Any]:
    """FLASHINFER_DISABLE_JIT=1 (serving from a prebuilt workspace): the router loads the partial module
    without compiling; the real launcher inside answers a call."""
    import jitguard

    jitguard.install()
    import flashinfer.gdn_prefill as gdn_prefill

    from jitguard.gdn_variants import module_router

    routed = module_router.router()
    out: dict[str, Any] = {"routed": module_router.is_routed(gdn_prefill), "router": routed is not None}
    assert routed is not None
    getter = gdn_prefill.get_gdn_prefill_module
    out["same_namespace"] = getter() is getter()
    plan = _plan()
    kernel = routed.kernel_for(plan.variants[0])
    out["modules"] = {name: [v.suffix for v in vs] for name, vs in routed.modules().items()}
    out["call"] = _call_on_cpu(kernel)
    from flashinfer.jit import env as jit_env

    out["full_so"] = (Path(jit_env.FLASHINFER_JIT_DIR) / "gdn_prefill_sm90" / "gdn_prefill_sm90.so").exists()
    return out


def settings() -> dict[str, Any]:
    """Whether importing flashinfer.gdn_prefill routes it, under the current environment."""
    import jitguard

    out: dict[str, Any] = {"install": jitguard.install()}
    import flashinfer.gdn_prefill as gdn_prefill

    from jitguard.gdn_variants import module_router

    out["routed"] = module_router.is_routed(gdn_prefill)
    out["cache_clear"] = callable(getattr(gdn_prefill.get_gdn_prefill_module, "cache_clear", None))
    return out


def _call_on_cpu(kernel: Any) -> str:
    """The module's gdn_prefill with CPU tensors of a Qwen3.5 shape: FlashInfer's launcher refuses them (no GPU
    here), which proves the call reached the real launcher of the loaded library."""
    import torch

    t, hq, hv, d = 64, 16, 32, 128
    bf16 = torch.bfloat16
    args = (
        torch.empty(t, hv, d, dtype=bf16),
        torch.empty(1, hv, d, d),
        torch.empty(t, hq, d, dtype=bf16),
        torch.empty(t, hq, d, dtype=bf16),
        torch.empty(t, hv, d, dtype=bf16),
        torch.tensor([0, t], dtype=torch.int64),
        torch.zeros(1, hv, d, d),
        torch.ones(t, hv),
        torch.ones(t, hv),
        0.0,
        torch.empty(128, dtype=torch.uint8),
    )
    try:
        kernel(*args)
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"
    return "returned"


SCENARIOS = {"build": build, "broken": broken, "prebuilt": prebuilt, "settings": settings}

if __name__ == "__main__":
    result = SCENARIOS[sys.argv[1]](*sys.argv[2:])  # type: ignore[operator]
    print(json.dumps(result))
