"""One engine start as the plugins run it, in a process of its own, for the start ledger's real tests:
the ledger begun, the warm snapshot restored from the store (JITGUARD_SHARE) and told to the ledger, a real
workload compiled, and the engine's ready point reached.

``python engine_start.py inductor:2`` compiles ``(x * 2 + 1).sin()`` with torch.compile on CPU (Inductor
generates and builds C++; a second process finds it in the FX graph cache); ``inductor:3`` is a changed
function (another cache key). ``triton`` compiles a real Triton kernel for sm_90 (no GPU needed to compile;
``triton:256``: another BLOCK constexpr, another key); ``triton-chained`` does
the same with a compilation listener set before jitguard's (it is called too).
"""

from __future__ import annotations

import logging
import sys


def inductor(multiplier: int) -> None:
    import torch

    @torch.compile
    def f(x: torch.Tensor) -> torch.Tensor:
        return (x * multiplier + 1).sin()

    f(torch.randn(8))


def triton_kernel(block: int = 128) -> None:
    import triton
    import triton.language as tl
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    @triton.jit
    def add(x, y, out, n, BLOCK: tl.constexpr):  # type: ignore[no-untyped-def]
        i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        m = i < n
        tl.store(out + i, tl.load(x + i, mask=m) + tl.load(y + i, mask=m), mask=m)

    signature = {"x": "*fp32", "y": "*fp32", "out": "*fp32", "n": "i32", "BLOCK": "constexpr"}
    triton.compile(
        ASTSource(add, signature=signature, constexprs={"BLOCK": block}), target=GPUTarget("cuda", 90, 32)
    )


def main(workload: str) -> None:
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(levelname)s %(name)s: %(message)s")
    from jitguard.config import Settings
    from jitguard.fleet import warm_start
    from jitguard.integrations import start_ledger

    if workload == "triton-chained":  # a listener someone set before jitguard: it must still be called
        import triton

        calls: list[bool] = []
        triton.knobs.compilation.listener = lambda **kwargs: calls.append(kwargs["cache_hit"])
    settings = Settings.from_env()
    start_ledger.begin("vllm", settings)
    start_ledger.covered_by(warm_start.restore_once(settings, engine="vllm"), "vllm", settings)
    kind, _, arg = workload.partition(":")
    if kind == "inductor":
        inductor(int(arg or 2))
    elif kind in ("triton", "triton-chained"):
        triton_kernel(int(arg or 128))
    if kind == "triton-chained":
        print(f"EARLIER LISTENER CALLED {calls}")
    start_ledger.ready("engine-core")


if __name__ == "__main__":
    main(sys.argv[1])
