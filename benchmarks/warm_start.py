"""Warm start anywhere: a real vLLM engine in its default config (torch.compile and CUDA graphs on) started on a
cold host, a warm host and a new host restored from the fleet's store, stock beside jitguard, in one run.

Usage (on the GPU host; vLLM payloads, as benchmarks/vllm_engine.py's header says):
    python3 benchmarks/warm_start.py --stage v026 --site /tmp/v026/site --out $OUT
    python3 benchmarks/warm_start.py --stage v024 --site /tmp/v024/site --out $OUT     # the seed's doomed start
    python3 benchmarks/warm_start.py --stage fleet4 --site /tmp/v026/site --out $OUT   # 4 engines at once
    python3 benchmarks/warm_start.py --table A.jsonl B.jsonl --out benchmarks/results  # table and chart, here

A "host" is one directory holding every cache an engine start fills (vLLM's, Triton's, Inductor's,
FlashInfer's workspace, jitguard's and the CuTeDSL's, HOME and XDG_CACHE_HOME too), always at the same path:
a new host is that directory emptied, as a new node of the same image has it. The store is a ``file://``
directory elsewhere on the disk. Rows:

- ``v026`` (vLLM 0.26.0, FlashInfer 0.6.14, CuTeDSL GDN, ``--gdn-prefill-backend flashinfer``): stock cold
  (every cache empty), stock warm; jitguard on a first host (cold, ``JITGUARD_SHARE_PUBLISH=1``: the engine
  saves its snapshot once ready; the run then also saves by command, as a Docker build or CI would), jitguard
  warm host, jitguard new host (emptied; the plugin restores from the store at registration).
- ``v024`` (vLLM 0.24.0, FlashInfer 0.6.12): the seed's doomed start, libcuda made unlinkable for real, GDN
  auto: jitguard first host (Triton/FLA, everything compiles), saved; jitguard new host; stock new host last,
  under what is left of the budget (it compiles FlashInfer's GDN until its limit).
- ``fleet4``: 4 jitguard engines at once on the one GPU (``kv_cache_memory_bytes``) from an emptied host and
  the warm store: one restores, three wait visibly.

Each row: time to ready, to the first token, tokens, and from the engine's own log what it spent compiling
(vLLM's "torch.compile takes", "Graph capturing finished", jitguard's CuTeDSL compile lines) and the restore
(seconds, files, bytes fetched). Results are appended to ``/tmp/jitguard-warm/results.jsonl`` (across calls
while the host stays warm) and copied to ``$OUT``, each engine's log in ``$OUT/warm_start_logs_<stage>.tar.gz``; ``--table`` renders ``warm_start.md`` and the chart
``warm_start.svg`` from result files.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import engine_session  # beside this script
from engine_session import MIN_ROW_S, Budget, host_caches

HERE = Path(__file__).resolve().parent
SRC = HERE.parent / "src"
START = HERE / "vllm_engine_start.py"
WORK = Path("/tmp/jitguard-warm")
HOST = WORK / "host"  # every cache of "the host": emptied for a cold or new host, always this path
STORES = WORK / "stores"  # one store per release: stores/<vLLM version>
RESULTS = WORK / "results.jsonl"
KEEP = re.compile(r"jitguard: |torch\.compile took|Initial profiling|Graph capturing finished|Error|error:")
TORCH_COMPILE = re.compile(r"torch\.compile (?:takes|took) ([\d.]+) s in total")
PROFILE = re.compile(r"Initial profiling/warmup run took ([\d.]+) s")
GRAPHS = re.compile(r"Graph capturing finished in ([\d.]+) sec")
CUTEDSL = re.compile(r"compiled the CuTeDSL kernel .* in ([\d.]+) (s|min)")
RESTORED = re.compile(
    r"warm snapshot restored in ([\d.]+) s: (\d+) files written \(([\d.]+) (B|KiB|MiB|GiB) fetched"
)
WAITED = re.compile(r"waiting for the restore of warm snapshot")
UNITS = {"B": 1, "KiB": 1024, "MiB": 1024**2, "GiB": 1024**3}


@dataclass
class Row:
    stage: str
    name: str
    jitguard: bool
    host: str  # cold | warm | new
    vllm: str = ""
    limit_s: float = 0.0
    exit: str = ""
    ready_s: float | None = None
    ttft_s: float | None = None
    generated: int | None = None
    torch_compile_s: float = 0.0
    profile_s: float = 0.0  # vLLM's first forward (Triton's JIT, the CuTeDSL compiles of GDN prefill)
    graphs_s: float = 0.0
    cutedsl_compile_s: float = 0.0
    restore_s: float = 0.0
    restored_files: int = 0
    fetched_bytes: int = 0
    restorer: bool = False
    waited: bool = False
    lines: list[str] = field(default_factory=list)
    note: str = ""


def version_in(site: Path, name: str) -> str:
    for entry in sorted(site.glob(f"{name}-*.dist-info")):
        return entry.name[len(name) + 1 : -len(".dist-info")]
    return "?"


def store_of(site: Path) -> Path:
    return STORES / version_in(site, "vllm")


def host_env(
    site: Path, *, jitguard: bool, publish: bool = False, host: Path = HOST, **extra: str
) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("JITGUARD_", "VLLM_", "TRITON_", "CUTE_DSL_"))
    }
    env.update(
        host_caches(host),
        # pip --target skips the DSL's .pth: its packages dir goes on the path by hand
        PYTHONPATH=os.pathsep.join(
            str(p) for p in (SRC, site, site / "nvidia_cutlass_dsl" / "dsl_packages") if p.exists()
        ),
        VLLM_CACHE_ROOT=str(host / "vllm"),
        VLLM_USE_FLASHINFER_SAMPLER="0",
        BENCH_SKIP_ROUTER_WARMUP="1",  # vllm_engine_start.py says why
        VLLM_WORKER_MULTIPROC_METHOD="fork",
        **extra,
    )
    if jitguard:
        env["JITGUARD_SHARE"] = f"file://{store_of(site)}"
        env["JITGUARD_SHARE_PUBLISH"] = "1" if publish else "0"
    else:
        env["JITGUARD_DISABLE"] = "1"
    return env


def empty_host(host: Path = HOST) -> None:
    shutil.rmtree(host, ignore_errors=True)
    (host / "home").mkdir(parents=True)


def read_log(row: Row, done: engine_session.EngineRun) -> None:
    for seconds, line in done.lines:
        if m := TORCH_COMPILE.search(line):
            row.torch_compile_s += float(m.group(1))
        if m := PROFILE.search(line):
            row.profile_s += float(m.group(1))
        if m := GRAPHS.search(line):
            row.graphs_s += float(m.group(1))
        if m := CUTEDSL.search(line):
            row.cutedsl_compile_s += float(m.group(1)) * (60 if m.group(2) == "min" else 1)
        if m := RESTORED.search(line):
            row.restore_s = float(m.group(1))
            row.restored_files = int(m.group(2))
            row.fetched_bytes = int(float(m.group(3)) * UNITS[m.group(4)])
            row.restorer = True
        if WAITED.search(line):
            row.waited = True
        if KEEP.search(line) and len(row.lines) < 14:
            row.lines.append(f"[{seconds:6.1f} s] {line[:300]}")


def engine(
    row: Row, site: Path, model: Path, env: dict[str, str], gdn: str, budget: Budget, logs: Path
) -> Row | None:
    row.vllm = version_in(site, "vllm")
    row.limit_s = round(min(row.limit_s, budget.left()), 1)
    if row.limit_s < MIN_ROW_S:
        return None
    argv = [sys.executable, str(START), "serve", str(model), gdn, "greedy", "compiled"]
    done = engine_session.run(argv, env, limit_s=row.limit_s)
    finish(row, done, logs)
    return row


def finish(row: Row, done: engine_session.EngineRun, logs: Path) -> None:
    read_log(row, done)
    slug = re.sub(r"[^A-Za-z0-9.]+", "-", f"{row.stage} {row.name}").strip("-")
    (logs / f"{slug}.log").write_text(done.tail(min(len(done.lines), 4000)) + "\n")
    row.exit = "limit" if done.timed_out else str(done.status)
    row.ready_s, row.ttft_s, row.generated = done.ready_s, done.ttft_s, done.generated


def save_by_command(site: Path, notes: list[str]) -> None:
    """``jitguard warm save``, as a Docker build or CI step would run it after a first start."""
    env = host_env(site, jitguard=True)
    arch = os.environ.get("BENCH_ARCH", "9.0")
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "jitguard", "warm", "save", "--arch", arch, "--json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    took = time.monotonic() - started
    try:
        saved = json.loads(done.stdout).get("saved") or {}
    except ValueError:
        saved = {}
    notes.append(
        f"`jitguard warm save` after the first host: exit {done.returncode} in {took:.1f} s, "
        f"{saved.get('files', '?')} files, {saved.get('bytes', '?')} bytes ({saved.get('uploaded_files', '?')} "
        f"new blobs, {saved.get('uploaded_bytes', '?')} bytes uploaded); left out: {saved.get('left_out', {})}"
        + (f"; stderr: {done.stderr[-400:]}" if done.returncode else "")
    )


def model_for(site: Path, work: Path) -> Path:
    directory = work / f"model-{version_in(site, 'vllm')}"
    if not (directory / "config.json").exists():
        env = host_env(site, jitguard=False)
        subprocess.run([sys.executable, str(START), "model", str(directory)], env=env, check=True)
    return directory


def auto_saved(site: Path) -> bool:
    return any((store_of(site) / "v1" / "warm").rglob("*.json"))


def fresh_store(site: Path) -> None:
    shutil.rmtree(store_of(site), ignore_errors=True)
    store_of(site).mkdir(parents=True)


def stage_v026(site: Path, budget: Budget, logs: Path, notes: list[str]) -> list[Row]:
    model = model_for(site, WORK)
    fresh_store(site)
    rows: list[Row] = []
    plan = (
        (Row("v026", "stock cold", False, "cold", limit_s=300), True, False),
        (Row("v026", "stock warm", False, "warm", limit_s=200), False, False),
        (Row("v026", "jitguard first host (cold, publishes)", True, "cold", limit_s=300), True, True),
        (Row("v026", "jitguard warm host", True, "warm", limit_s=200), False, False),
        (Row("v026", "jitguard new host (restored from the store)", True, "new", limit_s=200), True, False),
    )
    for row, fresh, publish in plan:
        if fresh:
            empty_host()
        done = engine(
            row,
            site,
            model,
            host_env(site, jitguard=row.jitguard, publish=publish),
            "flashinfer",
            budget,
            logs,
        )
        if done is None:
            notes.append(f"{row.name}: not started, under {MIN_ROW_S:g} s of the budget left")
            continue
        rows.append(done)
        print(json.dumps(asdict(done))[:400], flush=True)
        if publish:
            time.sleep(2)
            notes.append(
                f"the engine's own save once ready (JITGUARD_SHARE_PUBLISH=1): {'in the store' if auto_saved(site) else 'not in the store'}"
            )
            save_by_command(site, notes)
    return rows


def stage_v024(site: Path, budget: Budget, logs: Path, notes: list[str]) -> list[Row]:
    sys.path.insert(0, str(HERE))
    from vllm_engine import libcuda_hidden, restore_leftovers

    restore_leftovers()
    model = model_for(site, WORK)
    fresh_store(site)
    rows: list[Row] = []
    with libcuda_hidden(host_env(site, jitguard=False), notes) as hidden:
        notes.append(f"v024: libcuda made unlinkable: {hidden or 'nothing could be hidden'}")
        plan = (
            (Row("v024", "jitguard first host (cold: Triton/FLA)", True, "cold", limit_s=330), True),
            (Row("v024", "jitguard new host (restored from the store)", True, "new", limit_s=200), False),
            (Row("v024", "stock new host (every cache empty)", False, "new", limit_s=150), False),
        )
        for row, first in plan:
            empty_host()
            done = engine(row, site, model, host_env(site, jitguard=row.jitguard), "auto", budget, logs)
            if done is None:
                notes.append(f"{row.name}: not started, under {MIN_ROW_S:g} s of the budget left")
                continue
            rows.append(done)
            print(json.dumps(asdict(done))[:400], flush=True)
            if first:
                save_by_command(site, notes)
    return rows


def stage_fleet4(site: Path, budget: Budget, logs: Path, notes: list[str]) -> list[Row]:
    """4 engines at once from an emptied host and the store the v026 stage filled."""
    model = model_for(site, WORK)
    if not auto_saved(site):
        notes.append("fleet4: the store holds no snapshot (run the v026 stage first in this warm host)")
        return []
    empty_host()
    env = host_env(site, jitguard=True, BENCH_KV_CACHE_BYTES=str(2 * 1024**3), BENCH_GPU_UTIL="0.2")
    limit = min(300.0, budget.left())
    argv = [sys.executable, str(START), "serve", str(model), "flashinfer", "greedy", "compiled"]
    import threading

    done: dict[int, engine_session.EngineRun] = {}

    def start(i: int) -> None:
        done[i] = engine_session.run(argv, env, limit_s=limit)

    threads = [threading.Thread(target=start, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    rows = []
    for i in range(4):
        row = Row("fleet4", f"engine {i + 1} of 4 at once (new host)", True, "new", limit_s=limit)
        row.vllm = version_in(site, "vllm")
        finish(row, done[i], logs)
        rows.append(row)
    restorers = sum(r.restorer for r in rows)
    waiters = sum(r.waited for r in rows)
    notes.append(f"fleet4: {restorers} engine(s) restored, {waiters} waited visibly for it")
    return rows


def machine(site: Path) -> dict[str, Any]:
    def run(cmd: list[str]) -> str:
        try:
            return subprocess.run(cmd, capture_output=True, text=True, timeout=30).stdout.strip()
        except (OSError, subprocess.TimeoutExpired):
            return "?"

    return {
        "gpu": run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"]),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "vllm": version_in(site, "vllm"),
        "flashinfer": version_in(site, "flashinfer_python"),
        "torch": run([sys.executable, "-c", "import torch; print(torch.__version__)"]),
        "date": time.strftime("%Y-%m-%d"),
    }


# ---- the table and the chart --------------------------------------------------------------------------------
LAYERS = (
    ("restore_s", "restore from the store (jitguard)", "#4c9f70"),
    ("torch_compile_s", "torch.compile (vLLM's log)", "#d08c2f"),
    (
        "profile_other_s",
        "first forward: Triton's JIT and the kernels' first run (vLLM's profile run)",
        "#e3c16f",
    ),
    (
        "cutedsl_compile_s",
        "CuTeDSL compile of GDN prefill (jitguard's log; inside the first forward)",
        "#c4473a",
    ),
    ("graphs_s", "CUDA graph capture", "#8a6fb5"),
    ("rest_s", "the rest: process start, imports, model load, KV cache, the first request", "#9aa3ad"),
)


def reparse(row: dict[str, Any], logs: list[Path]) -> dict[str, Any]:
    """``row`` with its log's numbers read again (this script's parser, from the engine's own log kept with
    the results), when that log is among ``logs``."""
    slug = re.sub(r"[^A-Za-z0-9.]+", "-", f"{row['stage']} {row['name']}").strip("-")
    for directory in logs:
        path = directory / f"{slug}.log"
        if path.is_file():
            fresh = Row(row["stage"], row["name"], row["jitguard"], row["host"])
            run = engine_session.EngineRun(limit_s=0.0)
            for raw in path.read_text(errors="replace").splitlines():
                stamp = re.match(r"\[\s*([\d.]+) s\] (.*)", raw)
                if stamp:
                    run.lines.append((float(stamp.group(1)), stamp.group(2)))
            read_log(fresh, run)
            keep = (
                "torch_compile_s",
                "profile_s",
                "graphs_s",
                "cutedsl_compile_s",
                "restore_s",
                "restored_files",
                "fetched_bytes",
                "restorer",
                "waited",
            )
            return {**row, **{k: getattr(fresh, k) for k in keep}}
    return row


def load(paths: list[Path]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    rows: list[dict[str, Any]] = []
    meta: list[dict[str, Any]] = []
    for path in paths:
        for line in path.read_text().splitlines():
            data = json.loads(line)
            (meta if "machine" in data else rows).append(data)
    return rows, meta


def parts(row: dict[str, Any]) -> dict[str, float]:
    ready = row.get("ready_s") or row.get("limit_s") or 0.0
    cutedsl = float(row.get("cutedsl_compile_s") or 0.0)
    known = {
        "restore_s": float(row.get("restore_s") or 0.0),
        "torch_compile_s": float(row.get("torch_compile_s") or 0.0),
        "profile_other_s": max(0.0, float(row.get("profile_s") or 0.0) - cutedsl),
        "cutedsl_compile_s": cutedsl,
        "graphs_s": float(row.get("graphs_s") or 0.0),
    }
    known["rest_s"] = max(0.0, ready - sum(known.values()))
    return known


def render(rows: list[dict[str, Any]], meta: list[dict[str, Any]]) -> str:
    lines = ["# Warm start anywhere: a real vLLM engine on a cold, a warm and a new host", ""]
    lines.append(
        "Made by `python3 benchmarks/warm_start.py --table warm_start.jsonl --logs warm_start_logs` from the "
        "device runs' results and the engines' own logs. vLLM's default config (torch.compile and CUDA graphs "
        "on), a tiny random-weight Qwen3-Next. `v026` and `fleet4`: `--gdn-prefill-backend flashinfer`, vLLM "
        "0.26.0's DeepSeek-shaped router-GEMM warmup skipped (no quack-kernels release runs with the "
        "nvidia-cutlass-dsl 4.6.0 it pins; `benchmarks/vllm_engine_start.py`). `v024`: GDN prefill `auto`, libcuda "
        "made unlinkable for real (the seed's doomed start: jitguard sends GDN to Triton/FLA; stock compiles "
        "FlashInfer's GDN until the row's limit)."
    )
    lines.append("")
    for m in meta:
        info = m["machine"]
        lines.append(
            f"- `{m['stage']}`: {info['gpu']}, {info['cpus']} CPUs, Python {info['python']}, vLLM {info['vllm']}, "
            f"FlashInfer {info['flashinfer']}, torch {info['torch']}, {info['date']}"
        )
        lines += [f"  - {n}" for n in m.get("notes", [])]
    lines += ["", *goals(rows)]
    lines += [
        "",
        "| stage | row | vLLM | exit | ready s | TTFT s | tokens | torch.compile s | first forward s | CuTeDSL compile s | graphs s | restore s | files restored | MiB fetched |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        cells = [
            r["stage"],
            r["name"],
            r["vllm"],
            r["exit"],
            _n(r.get("ready_s")),
            _n(r.get("ttft_s"), 2),
            str(r.get("generated") or "-"),
            _n(r["torch_compile_s"]),
            _n(r.get("profile_s", 0.0)),
            _n(r["cutedsl_compile_s"]),
            _n(r["graphs_s"]),
            _n(r["restore_s"]),
            str(r["restored_files"] or "-"),
            _n(r["fetched_bytes"] / 1024**2),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", "![time to ready per row](warm_start.svg)", ""]
    return "\n".join(lines) + "\n"


def goals(rows: list[dict[str, Any]]) -> list[str]:
    """The issue's goals, checked against the rows that measure them (a goal without its rows says so)."""
    by = {(r["stage"], r["name"].split(" (")[0]): r for r in rows}
    new, warm = by.get(("v026", "jitguard new host")), by.get(("v026", "jitguard warm host"))
    cold = by.get(("v026", "stock cold"))
    out = ["Goals:", ""]
    if new and warm and cold and new["ready_s"] and warm["ready_s"] and cold["ready_s"]:
        bound = warm["ready_s"] * 1.1 + new["restore_s"]
        out.append(
            f"- new host <= warm host + 10% + the restore: {new['ready_s']:.1f} s <= {bound:.1f} s: "
            f"{'met' if new['ready_s'] <= bound else 'NOT met'} (restore {new['restore_s']:.1f} s, "
            f"{new['fetched_bytes'] / 1024**2:.1f} MiB fetched)"
        )
        share = new["ready_s"] / cold["ready_s"]
        out.append(
            f"- new host <= 40% of stock cold: {new['ready_s']:.1f} s = {share:.0%} of {cold['ready_s']:.1f} s: "
            f"{'met' if share <= 0.4 else 'NOT met'}"
        )
    doomed = by.get(("v024", "jitguard new host"))
    if doomed and doomed.get("ready_s"):
        ok = doomed["ready_s"] < 60
        out.append(
            f"- the seed's doomed start on a new host under 60 s: {doomed['ready_s']:.1f} s: {'met' if ok else 'NOT met'}"
        )
    else:
        out.append(
            "- the seed's doomed start (vLLM 0.24.0, Triton fallback) on a new host under 60 s: not measured here"
        )
    fleet = [r for r in rows if r["stage"] == "fleet4"]
    if fleet:
        ready = [r["ready_s"] for r in fleet if r.get("ready_s")]
        out.append(
            f"- 4 engines at once from an empty host: {sum(r['restorer'] for r in fleet)} restored, "
            f"{len(ready)} of {len(fleet)} ready in {min(ready):.1f}-{max(ready):.1f} s"
            if ready
            else "- 4 engines at once: none ready"
        )
    return [*out, ""]


def _n(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def chart(rows: list[dict[str, Any]]) -> str:
    """A stacked bar per row (time to ready, split by what the engine's log says it spent), as SVG."""
    width, left, bar_h, gap, top = 980, 360, 22, 10, 40
    longest = max((sum(parts(r).values()) for r in rows), default=1.0) or 1.0
    scale = (width - left - 60) / longest
    height = top + len(rows) * (bar_h + gap) + 40 + 20 * len(LAYERS)
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif" font-size="12">',
        '<text x="10" y="22" font-size="15">Time to ready (s): what each start spent, from its own log</text>',
    ]
    for i, row in enumerate(rows):
        y = top + i * (bar_h + gap)
        label = f"{row['stage']}: {row['name']}"[:58]
        out.append(f'<text x="{left - 8}" y="{y + 15}" text-anchor="end">{_xml(label)}</text>')
        x = float(left)
        for key, _name, colour in LAYERS:
            w = parts(row)[key] * scale
            if w > 0:
                out.append(f'<rect x="{x:.1f}" y="{y}" width="{w:.1f}" height="{bar_h}" fill="{colour}"/>')
                x += w
        total = row.get("ready_s")
        text = f"{total:.1f} s" if total is not None else f"not ready ({row['exit']})"
        out.append(f'<text x="{x + 6:.1f}" y="{y + 15}">{text}</text>')
    y = top + len(rows) * (bar_h + gap) + 20
    for j, (_key, name, colour) in enumerate(LAYERS):
        out.append(f'<rect x="{left}" y="{y + 20 * j}" width="14" height="14" fill="{colour}"/>')
        out.append(f'<text x="{left + 20}" y="{y + 20 * j + 12}">{_xml(name)}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def _xml(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--stage", choices=("v026", "v024", "fleet4"))
    parser.add_argument("--site", type=Path)
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "/tmp/out")))
    parser.add_argument("--budget", type=float, default=560.0)
    parser.add_argument(
        "--table", type=Path, nargs="*", help="render warm_start.md and .svg from result files"
    )
    parser.add_argument(
        "--logs",
        type=Path,
        nargs="*",
        default=[],
        help="with --table: dirs of the engines' logs to read again",
    )
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    if args.table:
        table_rows, meta = load(args.table)
        table_rows = [reparse(row, args.logs) for row in table_rows]
        (args.out / "warm_start.md").write_text(render(table_rows, meta))
        (args.out / "warm_start.svg").write_text(chart(table_rows))
        print((args.out / "warm_start.md").read_text())
        return 0
    if args.stage is None or args.site is None:
        parser.error("--stage and --site (or --table)")
    budget = Budget(args.budget)
    logs = WORK / f"logs-{args.stage}"  # sent back as one archive: $OUT takes few files
    shutil.rmtree(logs, ignore_errors=True)
    logs.mkdir(parents=True)
    notes: list[str] = []
    stage = {"v026": stage_v026, "v024": stage_v024, "fleet4": stage_fleet4}[args.stage]
    rows = stage(args.site, budget, logs, notes)
    with open(RESULTS, "a") as handle:
        handle.write(json.dumps({"machine": machine(args.site), "stage": args.stage, "notes": notes}) + "\n")
        for row in rows:
            handle.write(json.dumps(asdict(row)) + "\n")
    shutil.copy(RESULTS, args.out / "warm_start.jsonl")
    shutil.make_archive(str(args.out / f"warm_start_logs_{args.stage}"), "gztar", logs)
    print("\n".join(notes))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
