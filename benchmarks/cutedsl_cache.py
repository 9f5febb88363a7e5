"""FlashInfer's CuTeDSL GDN prefill (>= 0.6.14): the first call per process, stock vs jitguard's kernel cache.

Usage (on the GPU host, FlashInfer >= 0.6.14 with nvidia-cutlass-dsl importable):
    python benchmarks/cutedsl_cache.py all --work DIR [--out benchmarks/results/cutedsl_cache]

``all`` starts one fresh process per row, in this order: stock FlashInfer (JITGUARD_DISABLE=1), stock again,
jitguard with an empty kernel cache (cold: compiles and keeps), jitguard again (warm: loads), and jitguard
again. Each process imports FlashInfer and calls ``flashinfer.gdn_prefill.chunk_gated_delta_rule`` directly,
as vLLM does, for three specialisations (Qwen3.5 GVA heads: 16 q/k, 32 v, D = 128, bf16, fp32 alpha/beta):
4x2048 with an initial state, 1x8192 with one (the long-sequence path), 4x2048 without. Per specialisation:
the first call (compile or load, synchronised), the median and the minimum of 50 later calls (steady state), the output's and
final state's error against jitguard's float64 recurrence (``jitguard.gdn.reference``), and a sha256 of the
output, so cold, warm and stock can be compared bit for bit. Writes ``<out>.jsonl`` (one row per process)
and ``<out>.md``.
"""

from __future__ import annotations

import argparse
import hashlib
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

HEADS = (16, 16, 32)  # q/k heads, v heads (GVA)
D = 128
STEADY_CALLS = 50
SPECS = (("4x2048 init", 4, 2048, True), ("1x8192 init", 1, 8192, True), ("4x2048 no-init", 4, 2048, False))
ROWS = (
    ("stock", "stock", False),
    ("stock again", "stock", False),
    ("jitguard cold", "jitguard", True),
    ("jitguard warm", "jitguard", False),
    ("jitguard warm again", "jitguard", False),
)


def _inputs(n: int, length: int, init: bool, seed: int) -> dict[str, Any]:
    import torch

    gen = torch.Generator(device="cuda").manual_seed(seed)
    hq, hk, hv = HEADS
    t = n * length
    h = max(hq, hv)

    def rnd(*shape: int, dtype: Any = torch.bfloat16) -> Any:
        return torch.randn(*shape, generator=gen, device="cuda", dtype=torch.float32).to(dtype)

    q = torch.nn.functional.normalize(rnd(t, hq, D, dtype=torch.float32), dim=-1).to(torch.bfloat16)
    k = torch.nn.functional.normalize(rnd(t, hk, D, dtype=torch.float32), dim=-1).to(torch.bfloat16)
    v = rnd(t, hv, D)
    alpha = (0.9 + 0.1 * torch.rand(t, h, generator=gen, device="cuda")).float()
    beta = torch.rand(t, h, generator=gen, device="cuda").float()
    state = (0.1 * rnd(n, h, D, D, dtype=torch.float32)) if init else None
    cu = torch.arange(0, t + 1, length, device="cuda", dtype=torch.int64)
    return dict(q=q, k=k, v=v, g=alpha, beta=beta, initial_state=state, cu_seqlens=cu)


def _errors(args: dict[str, Any], out: Any, state: Any) -> dict[str, float]:
    """Relative RMS and max abs error of output and final state against the float64 recurrence."""
    from jitguard.gdn.reference import recurrent_gated_delta_rule

    ref_o, ref_s = recurrent_gated_delta_rule(
        args["q"],
        args["k"],
        args["v"],
        args["g"].log(),
        args["beta"],
        cu_seqlens=args["cu_seqlens"],
        initial_state=args["initial_state"],
    )

    def rel(a: Any, b: Any) -> float:
        return float((a.double() - b).pow(2).mean().sqrt() / b.pow(2).mean().sqrt())

    return {
        "out_rel_rms": rel(out, ref_o),
        "out_max_abs": float((out.double() - ref_o).abs().max()),
        "state_rel_rms": rel(state, ref_s),
        "state_max_abs": float((state.double() - ref_s).abs().max()),
    }


def one_process(mode: str) -> dict[str, Any]:
    start = time.monotonic()
    import torch

    if mode == "jitguard":
        import jitguard

        jitguard.install()
    t_import = time.monotonic()
    import flashinfer.gdn_prefill as gdn

    row: dict[str, Any] = {"import_s": time.monotonic() - t_import, "specs": {}}
    for i, (name, n, length, init) in enumerate(SPECS):
        args = _inputs(n, length, init, seed=i)

        def call(args: dict[str, Any] = args) -> Any:
            return gdn.chunk_gated_delta_rule(
                args["q"],
                args["k"],
                args["v"],
                args["g"],
                args["beta"],
                initial_state=args["initial_state"],
                output_final_state=True,
                cu_seqlens=args["cu_seqlens"],
            )

        torch.cuda.synchronize()
        t0 = time.monotonic()
        out, state = call()
        torch.cuda.synchronize()
        first = time.monotonic() - t0
        times = []
        for _ in range(STEADY_CALLS):
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            e0.record()
            call()
            e1.record()
            torch.cuda.synchronize()
            times.append(e0.elapsed_time(e1))
        row["specs"][name] = {
            "first_call_s": first,
            "steady_ms": statistics.median(times),
            "steady_min_ms": min(times),
            "out_sha256": hashlib.sha256(out.float().cpu().numpy().tobytes()).hexdigest()[:16],
            **_errors(args, out, state),
        }
    row["first_calls_s"] = sum(s["first_call_s"] for s in row["specs"].values())
    row["process_s"] = time.monotonic() - start
    return row


def _versions() -> dict[str, str]:
    found = {}
    for dist in (
        "flashinfer-python",
        "nvidia-cutlass-dsl",
        "nvidia-cutlass-dsl-libs-cu13",
        "torch",
        "jitguard",
    ):
        try:
            found[dist] = version(dist)
        except PackageNotFoundError:
            found[dist] = "-"
    return found


def run_all(work: Path, out: Path) -> None:
    work.mkdir(parents=True, exist_ok=True)
    cache = work / "jitguard-cache"
    subprocess.run(["rm", "-rf", str(cache)], check=True)
    rows = []
    for label, mode, _fresh in ROWS:
        env = {**os.environ, "JITGUARD_CACHE_DIR": str(cache)}
        env.pop("JITGUARD_DISABLE", None)
        if mode == "stock":
            env["JITGUARD_DISABLE"] = "1"
        t0 = time.monotonic()
        proc = subprocess.run(
            [sys.executable, __file__, "one", mode], env=env, capture_output=True, text=True, timeout=900
        )
        marker = [line for line in proc.stdout.splitlines() if line.startswith("ROW ")]
        row = json.loads(marker[-1][4:]) if marker else {"error": proc.stderr[-3000:]}
        row.update(label=label, mode=mode, exit=proc.returncode, wall_s=time.monotonic() - t0)
        row["log"] = [line for line in proc.stderr.splitlines() if "jitguard" in line][-12:]
        rows.append(row)
        print(label, json.dumps({k: row.get(k) for k in ("exit", "first_calls_s", "process_s")}), flush=True)
    kernels = sorted(p.name for p in (cache / "kernels").glob("*.o")) if (cache / "kernels").is_dir() else []
    meta = {
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "host": platform.node(),
        "gpu": _gpu(),
        "cpus": os.cpu_count(),
        "versions": _versions(),
        "kernel_cache_objects": len(kernels),
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out.with_suffix(".jsonl"), "w") as handle:
        handle.write(json.dumps({"meta": meta}) + "\n")
        for row in rows:
            handle.write(json.dumps(row) + "\n")
    out.with_suffix(".md").write_text(_markdown(meta, rows))


def _gpu() -> str:
    try:
        import torch

        return torch.cuda.get_device_name()
    except Exception as exc:  # a benchmark without a GPU says so in its table
        return f"unknown ({exc})"


def _markdown(meta: dict[str, Any], rows: list[dict[str, Any]]) -> str:
    lines = [
        "# FlashInfer CuTeDSL GDN prefill: first call per process, stock vs jitguard's kernel cache",
        "",
        f"{meta['date']} on {meta['host']}: {meta['gpu']}, {meta['cpus']} CPUs; "
        + ", ".join(f"{k} {v}" for k, v in meta["versions"].items())
        + f". Kernel objects kept: {meta['kernel_cache_objects']}. Command: `python benchmarks/cutedsl_cache.py all`.",
        "",
        "| process | "
        + " | ".join(f"first call {s[0]} (s)" for s in SPECS)
        + " | first calls total (s) | process (s) |",
        "|---|" + "---|" * (len(SPECS) + 2),
    ]
    for row in rows:
        specs = row.get("specs", {})
        cells = [f"{specs[s[0]]['first_call_s']:.3f}" if s[0] in specs else "-" for s in SPECS]
        total = row.get("first_calls_s")
        lines.append(
            f"| {row['label']} | " + " | ".join(cells) + f" | {total:.3f} | {row.get('process_s', 0):.1f} |"
            if total is not None
            else f"| {row['label']} | failed (exit {row['exit']}) |"
        )
    lines += [
        "",
        f"Steady state (median and minimum of {STEADY_CALLS} calls, ms), error vs the float64 recurrence (relative RMS of the output / of the "
        "final state) and the output's sha256 prefix:",
        "",
        "| process | specialisation | steady median (ms) | min (ms) | out rel RMS | state rel RMS | out sha256 |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        for name, spec in row.get("specs", {}).items():
            lines.append(
                f"| {row['label']} | {name} | {spec['steady_ms']:.3f} | {spec.get('steady_min_ms', float('nan')):.3f} | "
                f"{spec['out_rel_rms']:.2e} | "
                f"{spec['state_rel_rms']:.2e} | `{spec['out_sha256']}` |"
            )
    lines += ["", "What jitguard logged (last lines per process):", ""]
    for row in rows:
        for line in row.get("log", []):
            lines.append(f"- {row['label']}: `{line.strip()[:200]}`")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    one = sub.add_parser("one", help="one process (internal)")
    one.add_argument("mode", choices=("stock", "jitguard"))
    every = sub.add_parser("all", help="every row, each in a fresh process")
    every.add_argument("--work", type=Path, required=True)
    every.add_argument("--out", type=Path, default=Path("benchmarks/results/cutedsl_cache"))
    args = parser.parse_args()
    if args.command == "one":
        print("ROW " + json.dumps(one_process(args.mode)), flush=True)
    else:
        run_all(args.work, args.out)


if __name__ == "__main__":
    main()
