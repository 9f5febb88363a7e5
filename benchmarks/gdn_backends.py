"""GDN prefill backends on one GPU: median kernel time per backend and shape, jitguard's dispatch overhead over
calling FlashInfer directly, and the first-call cost of each backend in a fresh process.

Usage (on the GPU host):
    python benchmarks/gdn_backends.py [--workspace DIR] [--shapes 4x2048,1x8192,16x512,1x32768]
        [--backends flashinfer,triton,torch] [--repeat 20] [--skip-first-call] [--out benchmarks/results/gdn_backends.md]

Shapes are N x L (N sequences of L tokens), Qwen3.5 GVA (16 q/k heads, 32 v heads), D = 128, bf16 q/k/v, fp32
g/beta, random fp32 initial state, final state returned (what vLLM's prefill does); q and k come l2-normalised.
FlashInfer 0.6.3 - 0.6.13 JIT-builds its GDN module on the first call (~6 min on 16 cores) unless the workspace
already holds it: ``--workspace`` sets FLASHINFER_WORKSPACE_BASE (for this process and the first-call workers)
so a prebuilt cache can be used. FLA autotunes on its first call per shape: warm-up calls absorb it.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from datetime import datetime, timezone
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

HEADS = (16, 16, 32)
HEAD_DIM = 128
PACKAGES = ("torch", "flashinfer-python", "nvidia-cutlass-dsl", "fla-core", "triton", "jitguard")


def pkg(name: str) -> str:
    try:
        return version(name)
    except PackageNotFoundError:
        return "-"


def parse_shape(text: str) -> tuple[int, ...]:
    n, length = (int(p) for p in text.lower().split("x"))
    return (length,) * n


def make(lengths: tuple[int, ...], seed: int = 0) -> Any:
    import torch

    from jitguard.gdn.shapes import make_inputs

    return make_inputs(
        lengths, *HEADS, HEAD_DIM, dtype=torch.bfloat16, device="cuda", seed=seed, with_state=True
    )


def jitguard_call(backend: str) -> Any:

    def call(x: Any) -> Any:
        return x.run(backend=backend)

    return call


def direct_flashinfer() -> Any:
    """The least a caller holding jitguard's convention (log-space g) must do to call FlashInfer itself: exp(g),
    and cu_seqlens as the engine has it (FlashInfer casts it to int64 itself)."""
    import torch
    from flashinfer.gdn_prefill import chunk_gated_delta_rule as fi

    def call(x: Any) -> Any:
        return fi(
            x.q,
            x.k,
            x.v,
            torch.exp(x.g),
            x.beta,
            scale=HEAD_DIM**-0.5,
            initial_state=x.initial_state,
            output_final_state=True,
            cu_seqlens=x.cu_seqlens,
        )

    return call


def gpu_ms(
    call: Any, x: Any, *, repeat: int, warmup: int, inner: int = 10, budget_s: float = 20.0
) -> tuple[float, int]:
    """Median GPU time (CUDA events) per call, over batches of ``inner`` back-to-back calls, as an engine issues
    them: host work then overlaps the GPU's, and only a host slower than the kernel shows. Stops early once
    ``budget_s`` is spent (at least 3 samples)."""
    import torch

    for _ in range(warmup):
        call(x)
    torch.cuda.synchronize()
    samples: list[float] = []
    spent = time.perf_counter()
    for _ in range(repeat):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(inner):
            call(x)
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end) / inner)
        if len(samples) >= 3 and time.perf_counter() - spent > budget_s:
            break
    return statistics.median(samples), len(samples)


def host_us(call: Any, x: Any, *, calls: int = 50, rounds: int = 40) -> float:
    """Host time to issue one call (Python, validation, dispatch, launches), without waiting for the GPU: the
    time of ``calls`` back-to-back calls, few enough that the launch queue never fills, GPU drained between
    rounds (untimed). Median over rounds."""
    import torch

    for _ in range(20):
        call(x)
    torch.cuda.synchronize()
    per_call = []
    for _ in range(rounds):
        started = time.perf_counter()
        for _ in range(calls):
            call(x)
        per_call.append((time.perf_counter() - started) / calls * 1e6)
        torch.cuda.synchronize()
    return statistics.median(per_call)


def first_call_worker(backend: str) -> None:
    """Runs in a fresh interpreter: prints JSON timings of import, first call and second call."""
    import torch

    t0 = time.perf_counter()
    x = make((2048,) * 4, seed=1)
    torch.cuda.synchronize()
    t_inputs = time.perf_counter()
    if backend == "flashinfer":
        import flashinfer.gdn_prefill  # noqa: F401
    elif backend == "triton":
        import fla.ops.gated_delta_rule  # noqa: F401
    t_import = time.perf_counter()
    call = jitguard_call(backend)
    call(x)
    torch.cuda.synchronize()
    t_first = time.perf_counter()
    call(x)
    torch.cuda.synchronize()
    t_second = time.perf_counter()
    print(
        json.dumps(
            {
                "backend": backend,
                "cuda_init_and_inputs_s": t_inputs - t0,
                "import_s": t_import - t_inputs,
                "first_call_s": t_first - t_import,
                "second_call_s": t_second - t_first,
            }
        )
    )


def first_calls(backends: list[str], timeout: float) -> list[dict[str, Any]]:
    rows = []
    for backend in backends:
        done = subprocess.run(
            [sys.executable, __file__, "--first-call-worker", backend],
            capture_output=True,
            text=True,
            timeout=timeout,
            env=os.environ.copy(),
        )
        if done.returncode != 0:
            tail = (done.stderr.strip().splitlines() or ["(no output)"])[-1]
            rows.append({"backend": backend, "error": tail[:200]})
            continue
        rows.append(json.loads(done.stdout.strip().splitlines()[-1]))
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", default="4x2048,1x8192,16x512,1x32768")
    parser.add_argument("--backends", default="flashinfer,triton,torch")
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument(
        "--workspace", type=Path, default=None, help="FLASHINFER_WORKSPACE_BASE (prebuilt cache)"
    )
    parser.add_argument("--skip-first-call", action="store_true")
    parser.add_argument("--first-call-timeout", type=float, default=1200.0)
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "gdn_backends.md")
    parser.add_argument("--first-call-worker", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.workspace is not None:
        os.environ["FLASHINFER_WORKSPACE_BASE"] = str(args.workspace)
    if args.first_call_worker:
        first_call_worker(args.first_call_worker)
        return 0

    import torch

    if not torch.cuda.is_available():
        print("gdn_backends.py needs a CUDA GPU", file=sys.stderr)
        return 2
    backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    command = "python " + " ".join([Path(sys.argv[0]).as_posix(), *sys.argv[1:]])

    # First-call cost first, in fresh processes, before this process warms any cache of its own.
    first = [] if args.skip_first_call else first_calls(backends, args.first_call_timeout)

    steady: list[tuple[str, str, float, int]] = []
    for shape in args.shapes.split(","):
        x = make(parse_shape(shape))
        variants = [(f"jitguard {b}", jitguard_call(b)) for b in backends]
        if "flashinfer" in backends:
            variants.insert(0, ("FlashInfer direct", direct_flashinfer()))
        for name, call in variants:
            try:
                ms, n = gpu_ms(call, x, repeat=args.repeat, warmup=args.warmup)
            except Exception as exc:  # a backend that cannot run here: report, go on
                steady.append((shape, name, float("nan"), 0))
                print(f"{shape} {name}: {type(exc).__name__}: {exc}".splitlines()[0], file=sys.stderr)
                continue
            steady.append((shape, name, ms, n))
            print(f"{shape:>8} {name:<20} {ms:9.3f} ms (median of {n})", file=sys.stderr)
        del x
        torch.cuda.empty_cache()

    overhead: list[tuple[str, str]] = []
    if "flashinfer" in backends:
        try:
            overhead = dispatch_overhead(args.shapes.split(","), steady)
        except Exception as exc:  # e.g. FlashInfer cannot run here: the report says so instead of crashing
            overhead = [
                ("dispatch overhead", f"not measured: {type(exc).__name__}: {str(exc).splitlines()[0]}")
            ]

    write_report(args.out, command, steady, overhead, first, backends)
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


def dispatch_overhead(shapes: list[str], steady: list[tuple[str, str, float, int]]) -> list[tuple[str, str]]:
    from jitguard.gdn.dispatch import dispatcher

    tiny = make((64,))
    direct_us = host_us(direct_flashinfer(), tiny)
    ours_us = host_us(jitguard_call("flashinfer"), tiny)
    auto_us = host_us(jitguard_call("auto"), tiny)
    auto_backend = next((d.backend for d in dispatcher().decisions() if d.requested == "auto"), "?")
    rows = [
        ("FlashInfer direct (with exp(g)), per call", f"{direct_us:.1f} us"),
        ("jitguard backend='flashinfer', per call", f"{ours_us:.1f} us"),
        (f"jitguard backend='auto' (chose {auto_backend}), per call", f"{auto_us:.1f} us"),
        (
            "dispatch overhead of backend='flashinfer' over direct (goal <= 2 us)",
            f"{ours_us - direct_us:+.1f} us",
        ),
        ("dispatch overhead of backend='auto' over direct (goal <= 2 us)", f"{auto_us - direct_us:+.1f} us"),
    ]
    by = {(s, n): ms for s, n, ms, _ in steady}
    for shape in shapes:
        d, j = by.get((shape, "FlashInfer direct")), by.get((shape, "jitguard flashinfer"))
        if d and j and d == d and j == j:
            rows.append(
                (
                    f"GPU time at {shape}: jitguard flashinfer vs direct (goal <= 2%)",
                    f"{(j / d - 1) * 100:+.1f}%",
                )
            )
    return rows


def write_report(
    out: Path,
    command: str,
    steady: list[tuple[str, str, float, int]],
    overhead: list[tuple[str, str]],
    first: list[dict[str, Any]],
    backends: list[str],
) -> None:
    import torch

    shapes = list(dict.fromkeys(s for s, *_ in steady))
    names = list(dict.fromkeys(n for _, n, *_ in steady))
    by = {(s, n): (ms, k) for s, n, ms, k in steady}
    lines = [
        "# GDN prefill backends",
        "",
        f"- Date: {datetime.now(timezone.utc).strftime('%Y-%m-%d %H:%M UTC')}",
        f"- GPU: {torch.cuda.get_device_name()} (CUDA {torch.version.cuda}); host {platform.node()}, "
        f"{os.cpu_count()} CPUs",
        "- Versions: " + ", ".join(f"{p} {pkg(p)}" for p in PACKAGES),
        f"- FLASHINFER_WORKSPACE_BASE: {os.environ.get('FLASHINFER_WORKSPACE_BASE', '(unset: $HOME)')}; "
        f"FLA_FLASH_QLA: {os.environ.get('FLA_FLASH_QLA', '(unset; jitguard sets 0)')}",
        f"- Command: `{command}`",
        f"- Inputs: Qwen3.5 GVA {HEADS[0]}/{HEADS[2]} heads, D={HEAD_DIM}, bf16 q/k/v, fp32 g/beta, "
        "random initial state, final state returned; q/k pre-normalised.",
        "",
        "## Median GPU time per call (ms, CUDA events around 10 back-to-back calls)",
        "",
        "| shape (N x L) | " + " | ".join(names) + " |",
        "|---|" + "---|" * len(names),
    ]
    for s in shapes:
        cells = []
        for n in names:
            ms, _ = by.get((s, n), (float("nan"), 0))
            cells.append("n/a" if ms != ms else f"{ms:.3f}")
        lines.append(f"| {s} | " + " | ".join(cells) + " |")
    if overhead:
        lines += ["", "## Dispatch overhead", "", "| measure | value |", "|---|---|"]
        lines += [f"| {k} | {v} |" for k, v in overhead]
        lines += [
            "",
            "Per-call figures: host time to issue one call (50 back-to-back calls on a 1 x 64 input, GPU drained "
            "between rounds, median of 40 rounds). 'Direct' includes the `exp(g)` a caller with log-space g must "
            "compute and passes cu_seqlens as the engine holds it (int32; FlashInfer casts it).",
        ]
    if first:
        lines += [
            "",
            "## First call in a fresh process (4 x 2048)",
            "",
            "| backend | import (s) | first call (s) | second call (s) |",
            "|---|---|---|---|",
        ]
        for row in first:
            if "error" in row:
                lines.append(f"| {row['backend']} | failed: {row['error']} | | |")
            else:
                lines.append(
                    f"| {row['backend']} | {row['import_s']:.2f} | {row['first_call_s']:.2f} | "
                    f"{row['second_call_s']:.3f} |"
                )
        lines += [
            "",
            "First call = jitguard's resolution (facts, pre-flight) + the backend's load (FlashInfer: JIT build or "
            "load of the cached module; FLA: Triton autotune and compile) + the first launch.",
        ]
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    raise SystemExit(main())
