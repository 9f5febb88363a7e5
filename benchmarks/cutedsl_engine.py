"""A real vLLM engine (>= 0.26: FlashInfer's CuTeDSL GDN prefill) started again and again: stock vs jitguard's
kernel cache, time to ready and to the first token.

Usage (on the GPU host, with a vLLM 0.26.0 payload on PYTHONPATH):
    python benchmarks/cutedsl_engine.py --work DIR [--out benchmarks/results/cutedsl_engine]

Rows, each a fresh engine (``benchmarks/vllm_engine_start.py serve MODEL flashinfer greedy``, its own session,
killed by process group after): stock (warms Triton's and vLLM's own caches), jitguard with an empty kernel
cache (cold), jitguard again (warm), stock again (every other cache as warm as for the warm rows), jitguard
again. vLLM logs to stdout: the jitguard lines of both streams are kept.
``JITGUARD_DISABLE=1`` makes a row stock: the plugin and the hook step aside. The run keeps within ``--budget``
seconds (one device call): each engine gets what is left of it (at most 420 s), a row is not started with less
than 60 s left, and the results are rewritten after every row, so a run cut short keeps the rows it finished.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import signal
import subprocess
import sys
import time
from datetime import datetime, timezone
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from engine_session import MIN_ROW_S, Budget  # beside this script

HERE = Path(__file__).resolve().parent
# Stock again after the warm rows: every other cache (Triton, vLLM's own) is as warm for it as for them.
ROWS = (
    ("stock (warms Triton)", True),
    ("jitguard cold", False),
    ("jitguard warm", False),
    ("stock after", True),
    ("jitguard warm again", False),
)
LIMIT_S = 420  # one engine, at most


def start_engine(model: Path, env: dict[str, str], log: Path, limit_s: float = LIMIT_S) -> dict[str, Any]:
    t0 = time.monotonic()
    with open(log, "w") as handle:
        proc = subprocess.Popen(
            [sys.executable, str(HERE / "vllm_engine_start.py"), "serve", str(model), "flashinfer", "greedy"],
            env=env,
            stdout=subprocess.PIPE,
            stderr=handle,
            text=True,
            start_new_session=True,
        )
        result: dict[str, Any] = {}
        try:
            out, _ = proc.communicate(timeout=limit_s)
        except subprocess.TimeoutExpired:
            out = ""
            result["timed_out"] = True
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    for line in out.splitlines():
        parts = line.split()
        if line.startswith("BENCH READY"):
            result["ready_s"] = float(parts[2]) - t0
        elif line.startswith("BENCH TTFT"):
            result["ttft_s"] = float(parts[2])
        elif line.startswith("BENCH GENERATED"):
            result["generated"] = int(parts[2])
    result["exit"] = proc.returncode
    result["wall_s"] = time.monotonic() - t0
    text = log.read_text(errors="replace").splitlines()
    both = out.splitlines() + text
    result["log"] = [line for line in both if "jitguard" in line.lower() or "CuTeDSL" in line][-10:]
    if "ready_s" not in result:
        result["tail"] = text[-15:]
    return result


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/cutedsl_engine"))
    parser.add_argument(
        "--budget", type=float, default=540.0, help="seconds for the whole run (default 540: one device call)"
    )
    args = parser.parse_args(argv)
    budget = Budget(args.budget)
    work = args.work
    work.mkdir(parents=True, exist_ok=True)
    model = work / "model"
    model.mkdir(exist_ok=True)
    subprocess.run([sys.executable, str(HERE / "vllm_engine_start.py"), "model", str(model)], check=True)
    cache = work / "jitguard-cache"
    subprocess.run(["rm", "-rf", str(cache)], check=True)
    meta = run_meta()
    rows: list[dict[str, Any]] = []
    for i, (label, stock) in enumerate(ROWS):
        left = budget.left()
        if left < MIN_ROW_S:
            meta["skipped"] = [name for name, _ in ROWS[i:]]
            print(f"{label} and the rows after it not started: {left:.0f} s of the budget left", flush=True)
            write_results(args.out, meta, rows)
            break
        env = {**os.environ, "JITGUARD_CACHE_DIR": str(cache), "VLLM_USE_FLASHINFER_SAMPLER": "0"}
        env.pop("JITGUARD_DISABLE", None)
        if stock:
            env["JITGUARD_DISABLE"] = "1"
        row = {"label": label, **start_engine(model, env, work / f"engine-{i}.log", min(LIMIT_S, left))}
        row["kernels_kept"] = len(list((cache / "kernels").glob("*.o")))  # what the next row can load
        rows.append(row)
        print(
            label, json.dumps({k: row.get(k) for k in ("exit", "ready_s", "ttft_s", "generated")}), flush=True
        )
        write_results(args.out, meta, rows)


def run_meta() -> dict[str, Any]:
    versions = {}
    for dist in ("vllm", "flashinfer-python", "nvidia-cutlass-dsl", "torch"):
        try:
            versions[dist] = version(dist)
        except PackageNotFoundError:
            versions[dist] = "-"
    return {
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "host": platform.node(),
        "cpus": os.cpu_count(),
        "versions": versions,
    }


def write_results(out: Path, meta: dict[str, Any], rows: list[dict[str, Any]]) -> None:
    """``out``.jsonl (the meta line, then one line per engine) and ``out``.md, from the rows so far."""
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out.with_suffix(".jsonl"), "w") as handle:
        handle.write(json.dumps({"meta": meta}) + "\n")
        for row in rows:
            handle.write(json.dumps(row) + "\n")
    versions = meta["versions"]
    lines = [
        "# vLLM engine start with FlashInfer's CuTeDSL GDN prefill: stock vs jitguard's kernel cache",
        "",
        f"{meta['date']} on {meta['host']} ({meta['cpus']} CPUs); "
        + ", ".join(f"{k} {v}" for k, v in versions.items())
        + ". Tiny random-weight Qwen3-Next (benchmarks/vllm_engine_start.py), `--gdn-prefill-backend flashinfer`, "
        "eager, TP1. Command: `python benchmarks/cutedsl_engine.py --work DIR`.",
        "",
        "| engine | ready (s) | first token (s) | tokens | exit | kernels kept after |",
        "|---|---|---|---|---|---|",
    ]
    for row in rows:
        ready = f"{row['ready_s']:.1f}" if "ready_s" in row else "-"
        ttft = f"{row['ttft_s']:.2f}" if "ttft_s" in row else "-"
        lines.append(
            f"| {row['label']} | {ready} | {ttft} | {row.get('generated', '-')} | {row['exit']} | "
            f"{row.get('kernels_kept', '-')} |"
        )
    if meta.get("skipped"):
        lines += ["", f"Not started (the run's budget was spent): {', '.join(meta['skipped'])}."]
    lines += ["", "What the engines logged about jitguard and CuTeDSL:", ""]
    for row in rows:
        for line in row.get("log", []) or row.get("tail", []):
            lines.append(f"- {row['label']}: `{line.strip()[:220]}`")
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
