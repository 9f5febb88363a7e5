"""The FlashInfer backend: ``flashinfer.gdn_prefill.chunk_gated_delta_rule`` (SM90 Hopper and newer).

Two eras share one signature: nvcc (0.6.3 - 0.6.13: a JIT module, routed through ``gdn_variants.module_router``)
and CuTeDSL (>= 0.6.14: in-process kernels, through ``cutedsl.persisting_compile``). From jitguard's
convention: ``alpha = exp(g)``, float32 alpha and beta, q/k l2-normalised by jitguard (docs/gdn.md).
"""

from __future__ import annotations

import functools
import importlib
import sys
from typing import TYPE_CHECKING, Any

from jitguard.decision.gdn_resolution import CallSpec
from jitguard.findings.catalog import make
from jitguard.findings.model import Finding
from jitguard.gdn.call import GdnCall
from jitguard.gdn.reference import l2norm
from jitguard.gdn_variants.module_router import route, router
from jitguard.gdn_variants.variant_plan import variant_of_call
from jitguard.status.gdn_backends import FLASHINFER_GDN

if TYPE_CHECKING:
    import torch

NAME = FLASHINFER_GDN.NAME
TITLE = FLASHINFER_GDN.TITLE
MODULE: str | None = FLASHINFER_GDN.MODULE
HEAD_DIM = 128
DTYPES = ("float16", "bfloat16")
FIRST_VERSION = "0.6.3"
CUTEDSL_VERSION = "0.6.14"
CUTEDSL_CACHE_MODULE = "flashinfer.gdn_kernels.delta_rule_dsl.custom_compile_cache"

_kernel: Any = None


@functools.lru_cache(maxsize=1)
def installed_version() -> str | None:
    """flashinfer-python's version from its metadata (no import), or None."""
    from importlib import metadata

    try:
        return metadata.version("flashinfer-python")
    except metadata.PackageNotFoundError:
        return None


def era(version: str | None) -> str | None:
    """'nvcc' (0.6.3 - 0.6.13), 'cutedsl' (>= 0.6.14), or None (not installed or too old for this op)."""
    if version is None:
        return None
    from packaging.version import InvalidVersion, Version

    try:
        v = Version(version)
    except InvalidVersion:
        return None
    if v < Version(FIRST_VERSION):
        return None
    return "nvcc" if v < Version(CUTEDSL_VERSION) else "cutedsl"


def input_findings(spec: CallSpec) -> list[Finding]:
    reasons = []
    if spec.device_type != "cuda":
        reasons.append(
            f"the inputs are on {spec.device_type}; FlashInfer's GDN prefill runs on CUDA tensors only"
        )
    if spec.dtype not in DTYPES:
        reasons.append(
            f"q/k/v are {spec.dtype}; FlashInfer's GDN kernels exist for float16 and bfloat16 only"
        )
    if spec.head_dim != HEAD_DIM:
        reasons.append(
            f"the head size is D={spec.head_dim}; FlashInfer's GDN prefill kernel is built for D=128 only"
        )
    if not reasons:
        return []
    alternative = "triton" if spec.device_type == "cuda" and spec.dtype != "float64" else "torch"
    return [
        make(
            "gdn-input-unsupported",
            backend=NAME,
            evidence=[spec.describe()],
            title=TITLE,
            reason="; ".join(reasons) + ".",
            alternative=alternative,
        )
    ]


def load() -> None:
    """Import FlashInfer's GDN prefill. nvcc era: route its module getter through jitguard's variant router
    (``gdn_variants.module_router``: a call builds only the instances it needs, ``prepare``), or, with the variants
    off (``JITGUARD_GDN_VARIANTS=all``), build (or load the cached) full module now, so a build or load
    failure is told apart from a launch failure."""
    global _kernel
    if _kernel is not None:
        return
    module = importlib.import_module("flashinfer.gdn_prefill")
    if era(installed_version()) == "nvcc":
        if not route(module):
            module.get_gdn_prefill_module()
    else:
        _check_dsl_kernel()
        compile_cache = sys.modules.get(CUTEDSL_CACHE_MODULE)
        if compile_cache is not None:
            # lazy: the kernel cache loads only where FlashInfer compiles with CuTeDSL
            from jitguard.cutedsl import persisting_compile

            persisting_compile.route(
                compile_cache
            )  # each kernel compiled once per host, not once per process
    _kernel = module.chunk_gated_delta_rule


def prepare(call: GdnCall) -> None:
    """Before the first launch of a kind of call: build and load the module that serves its instance (nvcc
    era, routed), so that build is a load-stage failure like the full module's. Later calls that need another
    instance (e.g. without an initial state) get it built on demand, just as visibly."""
    routed = router()
    variant = _variant(call, routed.family) if routed is not None else None
    if routed is not None and variant is not None:
        routed.prepare(variant)


def _variant(call: GdnCall, family: Any) -> Any:
    return variant_of_call(
        str(call.q.dtype),
        int(call.q.shape[1]),
        int(call.v.shape[1]),
        has_alpha=True,  # run() always passes alpha = exp(g) and beta
        has_beta=True,
        has_initial_state=call.initial_state is not None,
        checkpointing=False,
        family=family,
    )


def _check_dsl_kernel() -> None:
    """FlashInfer >= 0.6.14 swallows the ImportError of its CuTeDSL kernel module and later raises
    NotImplementedError("... DSL kernel is unavailable"); import the module ourselves to surface the cause."""
    import torch

    major = torch.cuda.get_device_capability()[0]
    symbol, source = {
        9: ("chunk_gated_delta_rule_sm90", "flashinfer.gdn_kernels.delta_rule_dsl"),
        10: ("chunk_gated_delta_rule_sm100", "flashinfer.gdn_kernels.blackwell"),
        12: ("chunk_gated_delta_rule_sm120", "flashinfer.gdn_kernels.delta_rule_dsl"),
    }.get(major, (None, None))
    if symbol is None or source is None:
        raise RuntimeError(f"FlashInfer has no GDN prefill kernel for compute capability {major}.x")
    kernels = importlib.import_module("flashinfer.gdn_kernels")
    if getattr(kernels, symbol, None) is None:
        try:
            importlib.import_module(source)  # raises the real ImportError / RuntimeError
        except ModuleNotFoundError as exc:
            if exc.name != source:  # a dependency is missing (e.g. cutlass): that is the cause
                raise
            # this FlashInfer version keeps the kernel elsewhere: nothing more to learn
        raise RuntimeError(f"FlashInfer's {symbol} is unavailable (flashinfer.gdn_kernels.{symbol} is None)")


def run(call: GdnCall) -> tuple[torch.Tensor, torch.Tensor | None]:
    """One validated call in jitguard's convention; ``(o, final_state or None)``."""
    import torch

    q, k = call.q, call.k
    if call.use_qk_l2norm:
        q, k = l2norm(q), l2norm(k)
    f32 = torch.float32
    g, beta = call.g, call.beta
    # exp() keeps g's strides: a transposed g would reach the kernel as a strided alpha it reads as packed.
    alpha = (g if g.dtype == f32 else g.float()).exp().contiguous()
    beta = beta.contiguous() if beta.dtype == f32 else beta.float().contiguous()
    # FlashInfer casts cu_seqlens to int64 itself; converting here too would cost a second kernel per call.
    cu_seqlens = call.cu_seqlens
    cu = cu_seqlens if cu_seqlens.is_cuda else cu_seqlens.to(q.device, non_blocking=True)
    state = None if call.initial_state is None else call.initial_state.contiguous()
    output_final_state = call.output_final_state
    result = _kernel(
        q.contiguous(),
        k.contiguous(),
        call.v.contiguous(),
        alpha,
        beta,
        scale=call.scale,
        initial_state=state,
        output_final_state=output_final_state,
        cu_seqlens=cu,
        use_qk_l2norm_in_kernel=False,
    )
    if output_final_state:
        return result[0], result[1]
    return result, None
