"""The engine proof's cost and outcome on a GPU host (FlashInfer >= 0.6.14, CuTeDSL era): jitguard's proof call
of FlashInfer's real ``chunk_gated_delta_rule`` on 64 tokens of Qwen3.5's GDN shapes (16 q/k heads, 32 value
heads, D = 128, bf16, a float32 state), as the SGLang plugin makes it (``integrations/proof.py``).

Usage: ``python benchmarks/engine_proof.py all --work DIR --dsl DIR [--out FILE.md]``; ``--dsl``: the DSL's
``dsl_packages`` directory, put on PYTHONPATH for the healthy rows and left off for the last (the DSL as
``pip install --target`` leaves it: ``import cutlass`` fails). One fresh process per row, one cache dir:

1. cold: an empty jitguard cache: the call compiles the kernel (and jitguard keeps it), the pass is recorded;
2. warm, called: the recorded pass removed, so the call runs: a kernel cache hit plus one launch;
3. warm, by record: the pass kept: no call, the key only;
4. DSL off the path: the call fails; ``auto`` moves the choice, the failure is recorded by fingerprint.

Each row: seconds of ``prove()`` (synchronised), whether FlashInfer was kept, proven, by record, and what was
recorded. Writes the table to stdout and ``--out``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROWS = ("cold", "warm-called", "warm-by-record", "dsl-off-path")


def one(row: str) -> dict[str, Any]:
    """One row, in this process."""
    import logging

    import torch

    logging.basicConfig(level=logging.INFO)
    import jitguard
    from jitguard.boundary.process_facts import ProcessFacts
    from jitguard.config import Settings
    from jitguard.decision.sglang_phases import PHASE_CHOICES
    from jitguard.integrations.choices import ChoiceGuard
    from jitguard.integrations.proof import PrefillShapes, Trial, prove, tiny_prefill_inputs
    from jitguard.state.failure_cache import FailureCache

    jitguard.install()  # FlashInfer's CuTeDSL compile through jitguard's kernel cache, as in an engine
    facts = ProcessFacts()
    facts.get()
    guard = ChoiceGuard("SGLang", facts)
    choice = PHASE_CHOICES["prefill"]
    trial = Trial(choice, "benchmarks/engine_proof.py", moved="Triton from now on.")
    shapes = PrefillShapes(16, 32, 128, 128, torch.bfloat16, torch.float32, torch.device("cuda"))
    calls = []

    def call() -> None:
        calls.append(1)
        from flashinfer.gdn_prefill import chunk_gated_delta_rule

        chunk_gated_delta_rule(**tiny_prefill_inputs(shapes))
        torch.cuda.synchronize()

    # What an engine has done before its proof point: FlashInfer imported, a CUDA context made.
    import flashinfer.gdn_prefill  # noqa: F401

    torch.zeros(1, device="cuda")
    torch.cuda.synchronize()
    started = time.perf_counter()
    kept = prove(guard, trial, call)
    seconds = time.perf_counter() - started
    cache = FailureCache(Settings.from_env().cache_dir)
    return {
        "row": row,
        "seconds": round(seconds, 3),
        "called": bool(calls),
        "kept": kept,
        "proven": guard.is_proven(choice),
        "recorded_failures": [list(r.codes) for r in cache.entries() if r.failed],
        "passes": sorted(p.name for p in (Settings.from_env().cache_dir / "proofs").glob("*.json")),
    }


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("what", choices=("all", *ROWS))
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--dsl", type=Path, required=True)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    if args.what != "all":
        print("RESULT " + json.dumps(one(args.what)), flush=True)
        return 0
    shutil.rmtree(args.work, ignore_errors=True)
    args.work.mkdir(parents=True)
    results = []
    for row in ROWS:
        if row == "warm-called":
            shutil.rmtree(args.work / "cache" / "proofs", ignore_errors=True)
        env = dict(os.environ, JITGUARD_CACHE_DIR=str(args.work / "cache"))
        parts = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p and Path(p) != args.dsl]
        env["PYTHONPATH"] = os.pathsep.join(parts if row == "dsl-off-path" else [str(args.dsl), *parts])
        proc = subprocess.run(
            [sys.executable, __file__, row, "--work", str(args.work), "--dsl", str(args.dsl)],
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
        lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
        jitguard_lines = [line for line in proc.stderr.splitlines() if "jitguard:" in line][-4:]
        if not lines:
            print(proc.stdout[-3000:], proc.stderr[-5000:], sep="\n")
            results.append({"row": row, "error": f"exit {proc.returncode}"})
            continue
        result = json.loads(lines[-1][len("RESULT ") :])
        result["log"] = jitguard_lines
        results.append(result)
    import torch

    head = (
        f"GPU {torch.cuda.get_device_name(0)}, torch {torch.__version__}, Python {platform.python_version()}; "
        "one fresh process per row, one jitguard cache dir"
    )
    table = [
        head,
        "",
        "| row | prove() s | called | FlashInfer kept | proven | recorded failures |",
        "|---|---|---|---|---|---|",
    ]
    for r in results:
        if "error" in r:
            table.append(f"| {r['row']} | {r['error']} | | | | |")
            continue
        table.append(
            f"| {r['row']} | {r['seconds']} | {r['called']} | {r['kept']} | {r['proven']} | "
            f"{r['recorded_failures'] or '-'} |"
        )
    text = (
        "\n".join(table)
        + "\n\n"
        + "\n".join(f"- {r['row']}: {line}" for r in results for line in r.get("log", []))
    )
    print(text)
    if args.out:
        args.out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
