"""A new host under another cache root (issue 38.3): a real vLLM engine in its default config (torch.compile
and CUDA graphs on) on a first host, then on new hosts whose every cache, HOME and XDG root lie at other
paths, restored from the first host's store; stock beside jitguard, each start's ledger beside its row.

    python3 benchmarks/relocate.py run --part first --site /tmp/site --out $OUT     # stock cold, warm; jitguard first host
    python3 benchmarks/relocate.py run --part second --site /tmp/site --out $OUT    # the warm host, the new hosts
    python3 benchmarks/relocate.py run --part jitguard --site /tmp/site --out $OUT  # the jitguard rows in one call
    python3 benchmarks/relocate.py run --part all --site /tmp/site --out $OUT       # every row, one machine
    python3 benchmarks/relocate.py run --part pinned --site /tmp/site --out $OUT    # the jitguard rows, KV cache pinned
    python3 benchmarks/relocate.py table A.jsonl [B.jsonl ...] --out benchmarks/results

Rows (the payload of benchmarks/dsl_engine.py, vLLM 0.26.0 + FlashInfer 0.6.14 with the DSL importable;
``--gdn-prefill-backend flashinfer``; hosts as in warm_start.py, the model at one path for all):

- stock cold and stock warm on host A (``/tmp/jitguard-warm/host``);
- jitguard first host (A emptied; ``JITGUARD_SHARE_PUBLISH=1``, then ``jitguard warm save``), jitguard warm
  host (A again);
- jitguard new host B (``/tmp/jitguard-warm/elsewhere/second-host``: every cache root, HOME and XDG differ),
  restored from the store under ``JITGUARD_WARM=require``: must-hit should pass (``jitguard starts --check``
  exit 0);
- jitguard new host C (another root again) with a planted key change (``VLLM_CPU_OMP_THREADS_BIND=nobind``: a
  variable vLLM hashes into its compile-cache key that changes nothing on a GPU), under require: must-hit
  should fail, naming the variable (exit 1).

- ``--part pinned``: the jitguard first host, new host B and the planted row C again with the KV cache size pinned
  (``kv_cache_memory_bytes``, ``PINNED``). vLLM's mamba conv1d kernels take the number of cache lines as a
  ``tl.constexpr``, and vLLM sizes the cache from the free memory its profile run measures: a start that measured
  otherwise compiles them again under another key, which must-hit reports. Pinned, every host has one size.

Each row keeps its ledger line, the newest start of ``jitguard starts --json`` on that host and the
compile-cache key directories vLLM holds there. Results go to ``/tmp/jitguard-warm/relocate.jsonl`` (across
calls while the host stays warm) and ``$OUT/relocate.jsonl``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import engine_session  # beside this script
from engine_session import Budget
from warm_start import (
    HOST,
    WORK,
    Row,
    empty_host,
    engine,
    fresh_store,
    host_env,
    machine,
    model_for,
    save_by_command,
)

RESULTS = WORK / "relocate.jsonl"
SECOND = WORK / "elsewhere" / "second-host"
THIRD = WORK / "third" / "host-c"
PLANTED = {"VLLM_CPU_OMP_THREADS_BIND": "nobind"}
PINNED = {"BENCH_KV_CACHE_BYTES": str(4 << 30)}  # kv_cache_memory_bytes: one cache size on every host


def jitguard(env: dict[str, str], *args: str) -> tuple[int, str]:
    done = subprocess.run(
        [sys.executable, "-m", "jitguard", *args], env=env, capture_output=True, text=True, timeout=120
    )
    return done.returncode, done.stdout


def key_dirs(host: Path) -> list[str]:
    root = host / "vllm" / "torch_compile_cache"
    return sorted(p.name for p in root.iterdir() if p.is_dir()) if root.is_dir() else []


def ledger_of(row: Row, env: dict[str, str], host: Path, extra: dict[str, Any]) -> None:
    """The row's start as jitguard recorded it on that host (jitguard rows), and the key directories."""
    extra["key_dirs"] = key_dirs(host)
    if not row.jitguard:
        return
    code, out = jitguard(env, "starts", "--last", "1", "--check", "--json")
    extra["check_exit"] = code
    try:
        payload = json.loads(out)
    except ValueError:
        extra["starts_error"] = out[-400:]
        return
    starts = payload.get("starts") or []
    extra["ledger"] = starts[0] if starts else None
    extra["check"] = payload.get("check")


def ledger_line(row: Row, logs: Path) -> str:
    """The line jitguard logs at ready, from the row's whole log (``warm_start.finish`` wrote it)."""
    slug = re.sub(r"[^A-Za-z0-9.]+", "-", f"{row.stage} {row.name}").strip("-")
    path = logs / f"{slug}.log"
    text = path.read_text(errors="replace") if path.exists() else ""
    return next((line for line in text.splitlines() if "start ledger:" in line), "")


def one(
    row: Row,
    site: Path,
    model: Path,
    env: dict[str, str],
    host: Path,
    budget: Budget,
    logs: Path,
    rows: list[dict[str, Any]],
    notes: list[str],
) -> None:
    done = engine(row, site, model, env, "flashinfer", budget, logs)
    if done is None:
        notes.append(f"{row.name}: not started, under {engine_session.MIN_ROW_S:g} s of the budget left")
        return
    extra: dict[str, Any] = {"host_path": str(host)}
    ledger_of(done, env, host, extra)
    record = {**asdict(done), **extra, "ledger_line": ledger_line(done, logs)}
    rows.append(record)
    print(json.dumps({k: record[k] for k in ("name", "ready_s", "torch_compile_s", "key_dirs")}), flush=True)
    print("   ", record["ledger_line"][:400], flush=True)


def part_first(site: Path, budget: Budget, logs: Path, notes: list[str]) -> list[dict[str, Any]]:
    model = model_for(site, WORK)
    fresh_store(site)
    rows: list[dict[str, Any]] = []
    empty_host()
    for name, host_kind in (("stock cold", "cold"), ("stock warm", "warm")):
        row = Row("relocate", name, False, host_kind, limit_s=300)
        one(row, site, model, host_env(site, jitguard=False), HOST, budget, logs, rows, notes)
    return rows + first_host(site, budget, logs, notes)


def first_host(
    site: Path, budget: Budget, logs: Path, notes: list[str], pinned: dict[str, str] | None = None
) -> list[dict[str, Any]]:
    model = model_for(site, WORK)
    rows: list[dict[str, Any]] = []
    empty_host()
    name = "jitguard first host (cold, publishes)" + (", KV cache pinned" if pinned else "")
    row = Row("relocate", name, True, "cold", limit_s=300)
    env = {**host_env(site, jitguard=True, publish=True), **(pinned or {})}
    one(row, site, model, env, HOST, budget, logs, rows, notes)
    time.sleep(2)
    save_by_command(site, notes)
    return rows


def part_jitguard(site: Path, budget: Budget, logs: Path, notes: list[str]) -> list[dict[str, Any]]:
    """The jitguard rows in one call: the first host (a fresh store), then ``second``."""
    fresh_store(site)
    return first_host(site, budget, logs, notes) + part_second(site, budget, logs, notes)


def part_all(site: Path, budget: Budget, logs: Path, notes: list[str]) -> list[dict[str, Any]]:
    """Every row in one call (one machine, so stock and jitguard compare)."""
    return part_first(site, budget, logs, notes) + part_second(site, budget, logs, notes)


def part_second(site: Path, budget: Budget, logs: Path, notes: list[str]) -> list[dict[str, Any]]:
    model = model_for(site, WORK)
    rows: list[dict[str, Any]] = []
    row = Row("relocate", "jitguard warm host", True, "warm", limit_s=200)
    one(row, site, model, host_env(site, jitguard=True), HOST, budget, logs, rows, notes)
    return rows + new_hosts(site, budget, logs, notes)


def part_pinned(site: Path, budget: Budget, logs: Path, notes: list[str]) -> list[dict[str, Any]]:
    """The jitguard rows with the KV cache size pinned (``PINNED``): a fresh store, the first host, the new hosts."""
    fresh_store(site)
    return first_host(site, budget, logs, notes, PINNED) + new_hosts(site, budget, logs, notes, PINNED)


def new_hosts(
    site: Path, budget: Budget, logs: Path, notes: list[str], pinned: dict[str, str] | None = None
) -> list[dict[str, Any]]:
    """New host B restored under another root, then C with a planted key change, both under must-hit."""
    model = model_for(site, WORK)
    rows: list[dict[str, Any]] = []
    suffix = ", KV cache pinned" if pinned else ""
    for host, name, planted in (
        (SECOND, "jitguard new host under another root (restored, must-hit)", {}),
        (THIRD, "jitguard new host, another root, a planted key change (must-hit)", PLANTED),
    ):
        empty_host(host)
        env = {
            **host_env(site, jitguard=True, host=host, JITGUARD_WARM="require"),
            **planted,
            **(pinned or {}),
        }
        row = Row("relocate", name + suffix, True, "new", limit_s=200)
        one(row, site, model, env, host, budget, logs, rows, notes)
    return rows


# ---- the table ------------------------------------------------------------------------------------------
def render(rows: list[dict[str, Any]], meta: dict[str, Any]) -> str:
    def cell(value: Any, unit: str = " s") -> str:
        return "-" if value is None else f"{value:.1f}{unit}" if isinstance(value, float) else str(value)

    lines = [
        "# A new host under another cache root",
        "",
        "Generated by `benchmarks/relocate.py` (its header says how). Every row one real vLLM engine start in "
        "its default config; a new host is an empty directory at another path for every cache, HOME and XDG root,"
        " restored from the first host's `file://` store.",
        "",
        f"Machine: {meta.get('gpu', '?')}, {meta.get('cpus', '?')} CPUs; vLLM {meta.get('vllm', '?')}, "
        f"FlashInfer {meta.get('flashinfer', '?')}, torch {meta.get('torch', '?')}, python "
        f"{meta.get('python', '?')}; {meta.get('date', '?')}.",
        "",
        "| start | host path | ready | torch.compile | first request | key dirs in vLLM's cache | must-hit check |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        check = row.get("check_exit")
        lines.append(
            f"| {row['name']} | `{row.get('host_path', '')}` | {cell(row.get('ready_s'))} | "
            f"{cell(row.get('torch_compile_s'))} | {cell(row.get('ttft_s'))} | "
            f"{', '.join(row.get('key_dirs') or []) or '-'} | {'-' if check is None else f'exit {check}'} |"
        )
    lines += ["", "## Each start's ledger (the line jitguard logs at ready)", ""]
    for row in rows:
        if row.get("ledger_line"):
            lines.append(f"- **{row['name']}**: `{row['ledger_line'].split('jitguard: ', 1)[-1][:600]}`")
        misses = ((row.get("check") or {}).get("misses")) or []
        for miss in misses[:3]:
            lines.append(f"  - must-hit miss: {json.dumps(miss)[:600]}")
    notes = meta.get("notes") or []
    if notes:
        lines += ["", "## Notes", "", *[f"- {note}" for note in notes]]
    return "\n".join(lines) + "\n"


def load(paths: list[Path]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    meta: dict[str, Any] = {"notes": []}
    for path in paths:
        for text in path.read_text().splitlines():
            entry = json.loads(text)
            if "machine" in entry:
                meta.update(entry["machine"])
                meta["notes"] += entry.get("notes", [])
            else:
                rows.append(entry)
    return rows, meta


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run")
    run.add_argument("--part", choices=("first", "second", "jitguard", "all", "pinned"), required=True)
    run.add_argument("--site", type=Path, required=True)
    run.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "/tmp/out")))
    run.add_argument("--budget", type=float, default=560.0)
    table = sub.add_parser("table")
    table.add_argument("results", type=Path, nargs="+")
    table.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    if args.command == "table":
        rows, meta = load(args.results)
        (args.out / "relocate.md").write_text(render(rows, meta))
        print((args.out / "relocate.md").read_text())
        return 0
    logs = WORK / f"logs-relocate-{args.part}"
    logs.mkdir(parents=True, exist_ok=True)
    notes: list[str] = []
    parts = {"first": part_first, "second": part_second, "jitguard": part_jitguard, "all": part_all}
    part = {**parts, "pinned": part_pinned}[args.part]
    rows = part(args.site, Budget(args.budget), logs, notes)
    with open(RESULTS, "a") as handle:
        handle.write(json.dumps({"machine": machine(args.site), "part": args.part, "notes": notes}) + "\n")
        for row in rows:
            handle.write(json.dumps(row) + "\n")
    (args.out / "relocate.jsonl").write_text(RESULTS.read_text())
    subprocess.run(["tar", "czf", str(args.out / f"relocate_logs_{args.part}.tar.gz"), "-C", str(logs), "."])
    print("\n".join(notes))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
