"""A real SGLang engine on the H200 host, stock (``JITGUARD_DISABLE=1``) beside jitguard: its offline
``sglang.Engine`` on a tiny random-weight Qwen3-Next (``sglang_engine_start.py``), SGLang's defaults otherwise
(CUDA graphs on), each engine in a session of its own under a time limit and killed with every process it left
by pid afterwards (``engine_session.py``). Rows:

  a  nvcc era (SGLang 0.5.15, FlashInfer 0.6.12), libcuda made unlinkable for real (``vllm_engine.py``'s
     ``libcuda_hidden``), ``--linear-attn-prefill-backend flashinfer``: jitguard stops at start-up with the
     cause and the fix; stock compiles FlashInfer's GDN prefill until its limit (its link would fail after)
  b  the same environment, SGLang choosing for itself: on SM90 SGLang 0.5.15 - 0.5.17 pick Triton for GDN
     prefill by themselves (FlashInfer only on SM100), so both serve and jitguard has nothing to move
  c  libcuda back (healthy): jitguard's first start with FlashInfer named builds only the model's GDN variants
     (supervised) and serves; its restart on the same host loads them; stock builds the whole module (66
     files, ~12 min on 16 cores) and is stopped at its limit
  d  CuTeDSL era (SGLang 0.5.16/0.5.17, FlashInfer 0.6.14+), FlashInfer named: jitguard cold, then warm (its
     kernel cache), stock cold, then warm

Every row starts on a "host" of its own (one directory holding every cache a start fills: SGLang's, Triton's,
Inductor's, FlashInfer's workspace, jitguard's, TVM-FFI's, the CuTeDSL's, HOME), except a restart, which reuses
its row's. Per-row limits (seconds; the run's ``--budget`` caps each at what is left, and a row with under a
minute left is not started, with a note):

  a: jitguard 120, stock 120 (run last of a+b)      b: jitguard 200, stock 200
  c: jitguard build 330, restart 150, stock what is left       d: 240, 150, 200, 150

The payloads: ``python3 benchmarks/sglang_payload.py 0.5.15 .gpu/sglang0515`` (and 0.5.17 into
``.gpu/sglang0517``), in the checkout the device calls send. A call carries at most 64 MiB and the host keeps
/tmp only while warm (30 s after a call), so the parts go one per call, back to back, the smallest (the last
part) with the zstandard wheel and ``unpack.py``; the call that carries the last one unpacks and runs:

    call 1, carry [P/part.2, P/zstandard-0.25.0-...whl, P/unpack.py]:  mkdir -p /tmp/p15 && cp P/* /tmp/p15/
    call 2, carry [P/part.0]:                                          cp P/part.0 /tmp/p15/
    call 3, carry [P/part.1]:  cp P/part.1 /tmp/p15/ && python3 -m pip install -q --no-index --no-deps
        --target /tmp/zst /tmp/p15/zstandard-*.whl && PYTHONPATH=/tmp/zst python3 /tmp/p15/unpack.py /tmp/s15
        /tmp/p15/part.* && rm /tmp/p15/part.* && python3 benchmarks/sglang_engine.py --rows a,b
        --site /tmp/s15/site --out $OUT --budget 520

(P = .gpu/sglang0515; ``payload.json`` beside the parts lists them; 0.5.17's five parts go the same way, one call
each, the last with the wheel, ``unpack.py`` and row d.) Then, while the host is warm:

    python3 benchmarks/sglang_engine.py --rows a,b --site /tmp/s15/site --out $OUT        # ~8 min
    python3 benchmarks/sglang_engine.py --rows c   --site /tmp/s15/site --out $OUT        # ~9 min
    python3 benchmarks/sglang_engine.py --rows d   --site /tmp/s17/site --out $OUT        # ~9 min
    python3 benchmarks/sglang_engine.py --table A.jsonl B.jsonl --out benchmarks/results  # here: the table

Each row: exit (status, or the limit), seconds to the first line that says what happens with FlashInfer (a
jitguard verdict, or stock's error), to ready, time to first token, tokens, the stage it ended in, the most
compilers alive at once and FlashInfer objects built, and the jitguard lines it logged. Results are appended to
``/tmp/jitguard-sglang/results.jsonl`` (across calls while the host stays warm) and copied to ``--out`` with
each engine's log (``logs/``) and ``sglang_engine.md``.
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
from contextlib import AbstractContextManager, nullcontext
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import engine_session  # beside this script
from engine_session import MIN_ROW_S, Budget
from vllm_engine import STOPPED, libcuda_hidden, restore_leftovers
from warm_start import _n, version_in

HERE = Path(__file__).resolve().parent
SRC = HERE.parent / "src"
START = HERE / "sglang_engine_start.py"
WORK = Path("/tmp/jitguard-sglang")
RESULTS = WORK / "results.jsonl"
ROWS = ("a", "b", "c", "d")
# The stages of one SGLang engine start, with the first log line that shows each began (SGLang's own lines,
# from its scheduler and model runner, and sglang_engine_start.py's BENCH lines).
STAGES: engine_session.Stages = (
    ("importing SGLang and building its server args", None),
    ("starting the scheduler", re.compile(r"Init torch distributed begin")),
    ("loading the model", re.compile(r"Load weight begin")),
    ("allocating the KV and Mamba caches", re.compile(r"Load weight end")),
    (
        "capturing CUDA graphs (the first forwards: GDN prefill, Triton's compiles)",
        re.compile(r"Capture .*graph begin"),
    ),
    ("the first request (1 token)", re.compile(r"^BENCH READY")),
    ("generating 8 tokens", re.compile(r"^BENCH TTFT")),
    ("done", re.compile(r"^BENCH GENERATED")),
)
KEEP = re.compile(
    r"jitguard: |Linear attention kernel backend|JIT-compiled|cannot find -l|Build of |ninja: build stopped"
    r"|Scheduler hit an exception|Error|error:|Capture .*graph (begin|end)"
)
VERDICT = re.compile(
    r"jitguard: (SGLang chose|FlashInfer .* was requested|FlashInfer .* passed pre-flight|FlashInfer .* failed)"
    r"|cannot find -lcuda|Build of \S+ failed|ninja: build stopped|Linear attention kernel backend"
)
GRAPHS = re.compile(r"Capture .*graph end\. elapsed=([\d.]+) s")
PTH_JOIN = re.compile(r"os\.path\.join\((\w+)\.__path__\[0\],\s*['\"]([\w./-]+)['\"]\)")
EXPECTS = ("serves", "stops", "fails or hangs", "serves or still building")


@dataclass(frozen=True)
class Plan:
    """One engine start of a row: who, how, for how long, and what it should do."""

    row: str
    name: str
    jitguard: bool
    prefill: str  # auto | flashinfer
    expect: str
    limit_s: float
    host: str  # the host directory's name (a restart names its first start's)
    fresh: bool = True  # empty the host first
    doomed: bool = False  # libcuda unlinkable


PLANS = (
    Plan(
        "a",
        "jitguard, --linear-attn-prefill-backend flashinfer",
        True,
        "flashinfer",
        "stops",
        120,
        "a-jg",
        doomed=True,
    ),
    Plan("b", "jitguard, SGLang's own choice", True, "auto", "serves", 200, "b-jg", doomed=True),
    Plan("b", "stock, SGLang's own choice", False, "auto", "serves", 200, "b-stock", doomed=True),
    Plan(
        "a",
        "stock, --linear-attn-prefill-backend flashinfer",
        False,
        "flashinfer",
        "fails or hangs",
        120,
        "a-stock",
        doomed=True,
    ),
    Plan("c", "jitguard, first start (supervised build)", True, "flashinfer", "serves", 330, "c-jg"),
    Plan("c", "jitguard, restart (same host)", True, "flashinfer", "serves", 150, "c-jg", fresh=False),
    Plan(
        "c",
        "stock, first start (whole module)",
        False,
        "flashinfer",
        "serves or still building",
        600,
        "c-stock",
    ),
    Plan("d", "jitguard, cold", True, "flashinfer", "serves", 240, "d-jg"),
    Plan("d", "jitguard, warm (same host)", True, "flashinfer", "serves", 150, "d-jg", fresh=False),
    Plan("d", "stock, cold", False, "flashinfer", "serves", 200, "d-stock"),
    Plan("d", "stock, warm (same host)", False, "flashinfer", "serves", 150, "d-stock", fresh=False),
)


@dataclass
class Row:
    row: str
    name: str
    jitguard: bool
    expect: str
    limit_s: float
    sglang: str = ""
    flashinfer: str = ""
    prefill: str = ""
    attention: str = ""
    exit: str = ""
    verdict_s: float | None = None
    ready_s: float | None = None
    ttft_s: float | None = None
    generated: int | None = None
    ended_in: str = ""
    peak_compilers: int = 0
    objects_built: int = 0
    graphs_s: float = 0.0  # CUDA graph capture, SGLang's own "elapsed"
    lines: list[str] = field(default_factory=list)
    ok: bool = False
    log: str = ""


# ---- the site and the hosts ---------------------------------------------------------------------------------
def cutedsl_era(site: Path) -> bool:
    """Whether the site's FlashInfer builds GDN prefill with the CuTeDSL (0.6.14+) rather than nvcc."""
    parts = tuple(int(p) for p in re.findall(r"\d+", version_in(site, "flashinfer_python"))[:3])
    return parts >= (0, 6, 14)


def attention_backend(site: Path) -> str:
    """SGLang's own default on an H200 (fa3) when the site holds sgl_kernel's FA3 build, else triton."""
    return "fa3" if any((site / "sgl_kernel").glob("flash_ops*.so")) else "triton"


def python_path(site: Path) -> str:
    """This tree's jitguard, the site, and the directories the site's ``.pth`` files name (``pip --target``
    installs them but nothing reads them there: the CuTeDSL's packages dir is one). A ``.pth`` names a dir
    either as a path line, or (nvidia-cutlass-dsl 4.4+) as an ``import`` line that joins a package's
    ``__path__[0]`` with a sub dir, read here without running it."""
    paths = [SRC, site]
    for pth in sorted(site.glob("*.pth")):
        for line in pth.read_text().splitlines():
            entry = line.strip()
            joined = PTH_JOIN.search(entry) if entry.startswith("import ") else None
            if joined:
                entry = f"{joined.group(1)}/{joined.group(2)}"
            elif not entry or entry.startswith(("#", "import ")):
                continue
            if (site / entry).is_dir():
                paths.append(site / entry)
    return os.pathsep.join(str(p) for p in paths)


def host_env(site: Path, host: Path, *, jitguard: bool) -> dict[str, str]:
    """One host: every cache an engine start fills under ``host``; this tree's jitguard, then the site."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JITGUARD_", "SGLANG_"))}
    env.update(
        engine_session.host_caches(host),
        PYTHONPATH=python_path(site),
        SGLANG_CACHE_DIR=str(host / "sglang"),
        SGLANG_DG_CACHE_DIR=str(host / "deep-gemm"),
        TVM_FFI_CACHE_DIR=str(host / "tvm-ffi"),
    )
    if not jitguard:
        env["JITGUARD_DISABLE"] = "1"
    return env


def model_for(site: Path) -> Path:
    """The model's config.json, written once per SGLang release by the transformers the site carries."""
    directory = WORK / f"model-{version_in(site, 'sglang')}"
    if not (directory / "config.json").exists():
        env = host_env(site, WORK / "hosts" / "model", jitguard=False)
        subprocess.run([sys.executable, str(START), "model", str(directory)], env=env, check=True)
    return directory


# ---- one engine start ---------------------------------------------------------------------------------------
def run_plan(plan: Plan, site: Path, budget: Budget, logs: Path) -> Row | None:
    """Start one engine under the plan's limit (or what the budget has left); None when there is no time."""
    row = Row(plan.row, plan.name, plan.jitguard, plan.expect, round(min(plan.limit_s, budget.left()), 1))
    if row.limit_s < MIN_ROW_S:
        return None
    row.sglang, row.flashinfer = version_in(site, "sglang"), version_in(site, "flashinfer_python")
    row.prefill, row.attention = plan.prefill, attention_backend(site)
    host = WORK / "hosts" / plan.host
    if plan.fresh:
        shutil.rmtree(host, ignore_errors=True)
    (host / "home").mkdir(parents=True, exist_ok=True)
    env = host_env(site, host, jitguard=plan.jitguard)
    argv = [sys.executable, str(START), "serve", str(model_for(site)), plan.prefill, row.attention]
    done = engine_session.run(argv, env, limit_s=row.limit_s, stages=STAGES)
    read_run(row, done)
    slug = re.sub(r"[^A-Za-z0-9.]+", "-", f"{row.row} {row.sglang} {row.name}").strip("-")
    (logs / f"{slug}.log").write_text(done.tail(min(len(done.lines), 4000)) + "\n")
    row.log = f"logs/{slug}.log"
    workspace = host / "flashinfer"
    row.objects_built = sum(1 for _ in workspace.rglob("*.o")) if workspace.exists() else 0
    row.ok = meets(row)
    return row


def read_run(row: Row, done: engine_session.EngineRun) -> None:
    """What the table needs from an engine's run: its outcome and the lines that matter from its log."""
    for seconds, line in done.lines:
        if row.verdict_s is None and VERDICT.search(line):
            row.verdict_s = seconds
        if graphs := GRAPHS.search(line):
            row.graphs_s += float(graphs.group(1))
        if KEEP.search(line) and len(row.lines) < 14:
            row.lines.append(f"[{seconds:6.1f} s] {line[:400]}")
    row.exit = "limit" if done.timed_out else str(done.status)
    row.ready_s, row.ttft_s, row.generated = done.ready_s, done.ttft_s, done.generated
    row.ended_in = f"{done.stage} (from {done.stage_s:g} s)"
    row.peak_compilers = done.peak_compilers


def meets(row: Row) -> bool:
    """``serves``: 8 tokens; ``stops``: an exit before ready that jitguard explained (its "was requested"
    line); ``fails or hangs``: anything but serving; ``serves or still building``: served, or stopped at its
    limit while compilers ran (the whole nvcc module takes longer than a device call)."""
    served = row.exit == "0" and row.generated == 8
    explained = any(STOPPED.search(line) for line in row.lines)
    return {
        "serves": served,
        "stops": row.exit not in ("0", "limit") and row.ready_s is None and explained,
        "fails or hangs": not served,
        "serves or still building": served or (row.exit == "limit" and row.peak_compilers > 0),
    }[row.expect]


def run_rows(rows: list[str], site: Path, budget: Budget, logs: Path, notes: list[str]) -> list[Row]:
    era = cutedsl_era(site)
    wrong = [r for r in rows if (r == "d") != era]
    if wrong:
        raise SystemExit(
            f"sglang_engine.py: rows {','.join(wrong)} need {'an nvcc' if era else 'a CuTeDSL'}-era SGLang "
            f"payload; {site} holds SGLang {version_in(site, 'sglang')} with FlashInfer "
            f"{version_in(site, 'flashinfer_python')} (rows a-c: 0.5.15; d: 0.5.16/0.5.17)"
        )
    restore_leftovers()
    done: list[Row] = []
    chosen = [p for p in PLANS if p.row in rows]
    doomed = [p for p in chosen if p.doomed]
    probe = host_env(site, WORK / "hosts" / "probe", jitguard=True)
    hiding: AbstractContextManager[list[str]] = libcuda_hidden(probe, notes) if doomed else nullcontext([])
    with hiding as hidden:
        if doomed:
            notes.append(
                f"libcuda made unlinkable for rows a-b: {', '.join(hidden) or 'nothing could be hidden'}"
            )
        for plan in doomed:
            keep(done, run_plan(plan, site, budget, logs), plan, notes)
    for plan in chosen:
        if not plan.doomed:
            keep(done, run_plan(plan, site, budget, logs), plan, notes)
    return done


def keep(done: list[Row], row: Row | None, plan: Plan, notes: list[str]) -> None:
    if row is None:
        notes.append(f"{plan.row} | {plan.name}: not started, under {MIN_ROW_S:g} s of the run's budget left")
        return
    done.append(row)
    print(
        f"BENCH ROW {row.row} | {row.name}: exit {row.exit}, verdict {row.verdict_s} s, ready {row.ready_s} s, "
        f"ttft {row.ttft_s} s, {row.generated} tokens, ended in {row.ended_in}: "
        f"{'as expected' if row.ok else 'NOT as expected'} ({row.expect})",
        flush=True,
    )


# ---- results ----------------------------------------------------------------------------------------------
def machine(site: Path, rows: list[str], notes: list[str]) -> dict[str, Any]:
    def run(cmd: list[str]) -> str:
        try:
            return subprocess.run(cmd, capture_output=True, text=True, timeout=60).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return "?"

    return {
        "machine": {
            "gpu": run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"]),
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "sglang": version_in(site, "sglang"),
            "flashinfer": version_in(site, "flashinfer_python"),
            "sglang_kernel": version_in(site, "sglang_kernel"),
            "torch": run([sys.executable, "-c", "import torch; print(torch.__version__)"]),
            "attention_backend": attention_backend(site),
            "date": time.strftime("%Y-%m-%d"),
        },
        "rows": rows,
        "command": " ".join(["python3", "benchmarks/sglang_engine.py", *sys.argv[1:]]),
        "notes": notes,
    }


FAILURE = re.compile(r"\b((?:\w+\.)*[A-Z]\w*(?:Error|Exception|Unavailable)): (.+)$")


def load(paths: list[Path]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The rows and the run records (machine, command, notes) of result files; each row that did not serve
    gets ``failure``: the last exception line of its log (``log``, beside the result file), when it has one."""
    rows: list[dict[str, Any]] = []
    meta: list[dict[str, Any]] = []
    for path in paths:
        for line in path.read_text().splitlines():
            if line.strip():
                data = json.loads(line)
                if "machine" in data:
                    meta.append(data)
                    continue
                if data.get("generated") != 8 and data.get("log"):
                    data["failure"] = failure_in(path.parent / data["log"])
                rows.append(data)
    return rows, meta


def failure_in(log: Path) -> str | None:
    """The last ``SomeError: message`` line of an engine's log, cut to one table cell; None without one."""
    try:
        text = log.read_text(errors="replace")
    except OSError:
        return None
    found = [m for line in text.splitlines() if (m := FAILURE.search(line))]
    if not found:
        return None
    kind, message = found[-1].group(1).rsplit(".", 1)[-1], found[-1].group(2)
    return f"{kind}: {message[:160]}".replace("|", "/")


ROW_TITLES = {
    "a": "(a) nvcc era, libcuda unlinkable, FlashInfer named for GDN prefill",
    "b": "(b) the same environment, SGLang choosing for itself",
    "c": "(c) healthy environment, FlashInfer named",
    "d": "(d) CuTeDSL era, FlashInfer named: cold, then warm",
}


def render(rows: list[dict[str, Any]], meta: list[dict[str, Any]]) -> str:
    out = ["# A real SGLang engine on the H200: stock beside jitguard", ""]
    out.append(
        "Made by `python3 benchmarks/sglang_engine.py --table ...` from the device runs' results. SGLang's "
        "offline `Engine`, a tiny random-weight Qwen3-Next (4 layers: 3 GDN with the real model's heads, K = V "
        "= 128; MoE), `load_format=dummy`, `skip_tokenizer_init`, SGLang's defaults otherwise (CUDA graphs on). "
        "Times in seconds from the engine's start: the first line saying what happens with FlashInfer (a "
        "jitguard verdict, stock's error, or SGLang's own backend line), ready; graphs: SGLang's CUDA graph "
        "capture (inside ready); TTFT: the first 1-token request (GDN prefill's first call: a FlashInfer JIT "
        "build happens there)."
    )
    out.append("")
    for m in meta:
        info = m["machine"]
        out.append(
            f"- rows {','.join(m['rows'])}: {info['gpu']}, {info['cpus']} CPUs, Python {info['python']}, "
            f"SGLang {info['sglang']}, FlashInfer {info['flashinfer']}, sglang-kernel {info['sglang_kernel']}, "
            f"torch {info['torch']}, full attention `{info['attention_backend']}`, {info['date']}: `{m['command']}`"
        )
        out += [f"  - {n}" for n in m.get("notes", [])]
    out += [
        "",
        "| row | SGLang | engine | exit | verdict | ready | graphs | TTFT | tokens | ended in | compilers (objects) "
        "| as expected | what failed (the log's last exception) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        exit_ = f"killed at {r['limit_s']:g} s" if r["exit"] == "limit" else r["exit"]
        out.append(
            f"| {r['row']} | {r['sglang']} | {r['name']} | {exit_} | {_n(r['verdict_s'])} | {_n(r['ready_s'])} | "
            f"{_n(r.get('graphs_s') or None)} | "
            f"{_n(r['ttft_s'], 2)} | {r['generated'] if r['generated'] is not None else '-'} | {r['ended_in']} | "
            f"{r['peak_compilers']} ({r['objects_built']}) | {'yes' if r['ok'] else 'NO'} ({r['expect']}) | "
            f"{r.get('failure') or '-'} |"
        )
    out += ["", "## What each engine logged", ""]
    for r in rows:
        out += [f"**{ROW_TITLES.get(r['row'], r['row'])}: {r['name']}** (SGLang {r['sglang']})", "", "```"]
        out += r["lines"] or ["(nothing matched)"]
        out += ["```", ""]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--rows", default="a,b", help="comma-separated rows to run: a, b, c (nvcc-era site), d"
    )
    parser.add_argument("--site", type=Path, help="an unpacked SGLang payload's site dir")
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "/tmp/out")))
    parser.add_argument("--budget", type=float, default=540.0, help="seconds for the whole run (default 540)")
    parser.add_argument("--table", type=Path, nargs="+", metavar="JSONL", help="render sglang_engine.md only")
    args = parser.parse_args(argv)
    if args.table:
        try:
            rows, meta = load(args.table)
            args.out.mkdir(parents=True, exist_ok=True)
            (args.out / "sglang_engine.md").write_text(render(rows, meta) + "\n")
        except (OSError, ValueError, KeyError, TypeError) as exc:
            print(
                f"sglang_engine.py: cannot render {args.table}: {exc!r} (give the results.jsonl files a run "
                "wrote to its --out)",
                file=sys.stderr,
            )
            return 2
        print(f"wrote {args.out / 'sglang_engine.md'} ({sum(r['ok'] for r in rows)}/{len(rows)} as expected)")
        return 0
    chosen = [r.strip() for r in args.rows.split(",") if r.strip()]
    unknown = [r for r in chosen if r not in ROWS]
    if unknown or not chosen:
        parser.error(f"--rows takes a comma-separated subset of {','.join(ROWS)}; got {args.rows!r}")
    if args.site is None or version_in(args.site, "sglang") == "?":
        parser.error(
            f"--site must be an unpacked SGLang payload's site dir (no sglang-*.dist-info in {args.site})"
        )
    budget = Budget(args.budget)
    logs = args.out / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    notes: list[str] = []
    done = run_rows(chosen, args.site, budget, logs, notes)
    notes.append(f"the whole run: {time.monotonic() - budget.started:.0f} s (budget {args.budget:g} s)")
    WORK.mkdir(parents=True, exist_ok=True)
    with open(RESULTS, "a") as handle:
        handle.write(json.dumps(machine(args.site, chosen, notes)) + "\n")
        for row in done:
            handle.write(json.dumps(asdict(row)) + "\n")
    shutil.copy(RESULTS, args.out / "sglang_engine.jsonl")
    all_rows, meta = load([RESULTS])
    (args.out / "sglang_engine.md").write_text(render(all_rows, meta) + "\n")
    print("\n".join(notes))
    return 0 if all(r.ok for r in done) else 1


if __name__ == "__main__":
    raise SystemExit(main())
