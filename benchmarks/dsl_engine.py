"""Never ready, then dead (issue 36): a real vLLM 0.26.0 engine (FlashInfer 0.6.14, CuTeDSL GDN prefill) in its
default config (torch.compile and CUDA graphs on), its nvidia-cutlass-dsl installed but not importable, stock
beside jitguard; then the same with the DSL healthy.

The payload (vLLM 0.26.0 with 'nvidia-cutlass-dsl[cu13]==4.6.0', built outside this repository) installs every
package with ``pip install --target``, which skips the DSL's .pth file: on /tmp/site alone the DSL is off the
path exactly as on a user's --target deployment. "Healthy" adds its ``dsl_packages`` directory by hand (what the
.pth would have done), and quack-kernels 0.6.0, which vLLM 0.26 needs to warm its own CuTeDSL router GEMM once
the DSL imports (make_payload.sh leaves it out; it pins the DSL at 4.6.0).

    python3 benchmarks/dsl_engine.py run --group off|healthy --site /tmp/site [--quack DIR] --work DIR --out FILE.jsonl
    python3 benchmarks/dsl_engine.py table OFF.jsonl HEALTHY.jsonl --out benchmarks/results/dsl_engine.md

On the device, with the payload built here (``echo /.gpu/ >> $(git rev-parse --git-common-dir)/info/exclude;
make_payload.sh 0.26.0 .gpu 'nvidia-cutlass-dsl[cu13]==4.6.0'``: 5 parts), each part in a
carried folder of its own (``.gpu/c0`` .. ``.gpu/c3``; ``.gpu/c4``: part.4, the zstandard wheel, unpack.py and
``pip download --no-deps quack-kernels==0.6.0``), one call per folder, back to back (the host keeps /tmp 30 s):
``mkdir -p /tmp/p && cp .gpu/cN/* /tmp/p/``; the last one then unpacks and runs a group:
``python3 -m pip install -q --no-index --no-deps --target /tmp/zst /tmp/p/zstandard-*.whl && PYTHONPATH=/tmp/zst
python3 /tmp/p/unpack.py /tmp /tmp/p/part.* && python3 -m pip install -q --no-index --no-deps --target /tmp/quack
/tmp/p/quack_kernels-*.whl && python3 benchmarks/dsl_engine.py run --group off --site /tmp/site --work /tmp/de
--out $OUT/off.jsonl``, and the next calls (warm) ``--group healthy --quack /tmp/quack``, ``--group unforeseen
--quack /tmp/quack``.

Every row shares one set of vLLM's, Triton's, Inductor's and FlashInfer's caches under --work (the first row
run there pays the cold compiles), and each group has a jitguard cache of its own; each engine runs in a session of its own and is killed by process group
after. ``JITGUARD_DISABLE=1`` makes a row stock.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import re
import signal
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from engine_session import MIN_ROW_S, Budget  # beside this script

HERE = Path(__file__).resolve().parent
SRC = HERE.parent / "src"
LIMIT_S = 300  # one engine, at most
# (label, stock, --gdn-prefill-backend)
GROUPS = {
    "off": (
        ("stock, DSL off the path", True, "auto"),
        ("jitguard, DSL off the path", False, "auto"),
        ("jitguard, DSL off the path, flashinfer named", False, "flashinfer"),
        ("stock, DSL off the path (warm caches)", True, "auto"),
    ),
    "healthy": (
        ("stock, DSL healthy", True, "auto"),
        ("jitguard, DSL healthy", False, "auto"),
        ("stock, DSL healthy (again)", True, "auto"),
        ("jitguard, DSL healthy (again)", False, "auto"),
    ),
    # The DSL healthy, FlashInfer's SM90 kernel module failing to import (as a broken native library would):
    # nothing the cheap pre-flight reads shows it, only the engine's own warmup call does.
    "unforeseen": (
        ("stock, SM90 kernel import fails", True, "auto"),
        ("jitguard, SM90 kernel import fails", False, "auto"),
        ("jitguard, SM90 kernel import fails (next start)", False, "auto"),
    ),
}
KERNEL = "flashinfer.gdn_kernels.delta_rule_dsl.delta_rule_sm90"
# Loaded by every process of the engine (sitecustomize on PYTHONPATH): the kernel module's import raises.
REFUSE = f"""import importlib.abc, sys


class _Refuse(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == {KERNEL!r}:
            raise ImportError("libcute_dsl_native.so: cannot open shared object file (dsl_engine.py's stand-in)")
        return None


sys.meta_path.insert(0, _Refuse())
"""
CHOSEN = re.compile(r"Using (\S+) GDN prefill kernel")
DEATH = ("DSL kernel is unavailable", "EngineDeadError", "NotImplementedError")


def start_engine(model: Path, gdn: str, env: dict[str, str], log: Path, limit_s: float) -> dict[str, Any]:
    t0 = time.monotonic()
    command = [
        sys.executable,
        str(HERE / "vllm_engine_start.py"),
        "serve",
        str(model),
        gdn,
        "greedy",
        "compiled",
    ]
    with open(log, "w") as handle:
        proc = subprocess.Popen(
            command, env=env, stdout=subprocess.PIPE, stderr=handle, text=True, start_new_session=True
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
            result["ready_s"] = round(float(parts[2]) - t0, 1)
        elif line.startswith("BENCH TTFT"):
            result["ttft_s"] = round(float(parts[2]), 2)
        elif line.startswith("BENCH GENERATED"):
            result["generated"] = int(parts[2])
    result["exit"] = proc.returncode
    result["wall_s"] = round(time.monotonic() - t0, 1)
    text = log.read_text(errors="replace").splitlines()
    both = out.splitlines() + text
    chosen = [m.group(1) for line in both if (m := CHOSEN.search(line))]
    result["gdn_chosen"] = chosen[0] if chosen else None
    result["warmup_failures"] = sum("GDN prefill kernel warmup" in line and "failed" in line for line in both)
    result["died_after_ready"] = "ready_s" in result and "generated" not in result
    result["death"] = next((line.strip()[:300] for line in both if any(d in line for d in DEATH)), None)
    result["jitguard"] = [line.strip()[:400] for line in both if "jitguard:" in line][:8]
    if "generated" not in result:
        result["tail"] = [line[:300] for line in text[-12:]]
    return result


def run(args: argparse.Namespace) -> None:
    budget = Budget(args.budget)
    work = args.work
    work.mkdir(parents=True, exist_ok=True)
    model = work / "model"
    model.mkdir(exist_ok=True)
    base = {k: v for k, v in os.environ.items() if not k.startswith(("JITGUARD_", "VLLM_", "PYTHONPATH"))}
    path = [str(SRC), str(args.site)]
    if args.group in ("healthy", "unforeseen"):
        path.append(str(args.site / "nvidia_cutlass_dsl" / "dsl_packages"))
        if args.quack:
            path.append(str(args.quack))
    if args.group == "unforeseen":
        refuse = work / "refuse-sm90-kernel"
        refuse.mkdir(exist_ok=True)
        (refuse / "sitecustomize.py").write_text(REFUSE)
        path.insert(0, str(refuse))
    base["PYTHONPATH"] = os.pathsep.join(path)
    subprocess.run(
        [sys.executable, str(HERE / "vllm_engine_start.py"), "model", str(model)], check=True, env=base
    )
    caches = work / "caches"  # vLLM's, Triton's, Inductor's, FlashInfer's: shared by the groups run here
    base.update(
        VLLM_CACHE_ROOT=str(caches / "vllm"),
        TRITON_CACHE_DIR=str(caches / "triton"),
        TORCHINDUCTOR_CACHE_DIR=str(caches / "inductor"),
        FLASHINFER_WORKSPACE_BASE=str(caches / "flashinfer"),
        JITGUARD_CACHE_DIR=str(caches / f"jitguard-{args.group}"),
        VLLM_USE_FLASHINFER_SAMPLER="0",
        PYTHONUNBUFFERED="1",
    )
    probe = subprocess.run(
        [sys.executable, "-c", "import cutlass, flashinfer, vllm; print(cutlass.__file__)"],
        env=base,
        capture_output=True,
        text=True,
    )
    meta = run_meta(base)
    meta.update(
        group=args.group, cutlass_import=(probe.stdout.strip() or probe.stderr.strip().splitlines()[-1:])
    )
    rows: list[dict[str, Any]] = []
    chosen = [GROUPS[args.group][int(i)] for i in args.pick.split(",")] if args.pick else GROUPS[args.group]
    for i, (label, stock, gdn) in enumerate(chosen[: args.rows]):
        left = budget.left()
        if left < MIN_ROW_S:
            meta["skipped"] = [name for name, _, _ in chosen[i : args.rows]]
            break
        env = dict(base)
        if stock:
            env["JITGUARD_DISABLE"] = "1"
        row = {"label": label, "stock": stock, "gdn_flag": gdn}
        row.update(start_engine(model, gdn, env, work / f"{args.group}-{i}.log", min(LIMIT_S, left)))
        rows.append(row)
        print(
            label,
            json.dumps({k: row.get(k) for k in ("exit", "ready_s", "generated", "gdn_chosen")}),
            flush=True,
        )
        write(args.out, meta, rows)
    write(args.out, meta, rows)


def run_meta(env: dict[str, str]) -> dict[str, Any]:
    script = (
        "import json, importlib.metadata as m, torch\n"
        "v = {}\n"
        "for d in ('vllm', 'flashinfer-python', 'nvidia-cutlass-dsl', 'quack-kernels', 'torch', 'jitguard'):\n"
        "    try: v[d] = m.version(d)\n"
        "    except m.PackageNotFoundError: v[d] = '-'\n"
        "print(json.dumps({'versions': v, 'gpu': torch.cuda.get_device_name(0)}))\n"
    )
    proc = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True)
    found = json.loads(proc.stdout) if proc.returncode == 0 else {"versions": {}, "gpu": proc.stderr[-200:]}
    smi = subprocess.run(
        ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"], capture_output=True, text=True
    )
    return {
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "host": platform.node(),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "driver": smi.stdout.strip(),
        **found,
    }


def write(out: Path, meta: dict[str, Any], rows: list[dict[str, Any]]) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out, "w") as handle:
        handle.write(json.dumps({"meta": meta}) + "\n")
        for row in rows:
            handle.write(json.dumps(row) + "\n")


# jitguard's lines every row prints (the sites it found, the facts' cost): left out of the table's last column.
ROUTINE = ("choice sites found", "this host's facts")
SWITCHED = "failed on first use"  # the guard's line when a warmup or proof call fails and the choice moves
LOG_PREFIX = re.compile(r"^(\(\w+ pid=\d+\) )?(INFO|WARNING|ERROR) \S+ \S+ \[[^]]+\] ")


def _message(line: str) -> str:
    """A log line without its process, level, time and source prefix."""
    return LOG_PREFIX.sub("", line)


def table(args: argparse.Namespace) -> None:
    runs = []
    for path in args.results:
        lines = [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]
        runs.append((lines[0]["meta"], lines[1:]))
    meta = runs[0][0]
    v = meta["versions"]
    out = [
        "# Never ready, then dead: vLLM 0.26.0 with its CUTLASS DSL not importable, stock vs jitguard (issue 36)",
        "",
        f"{meta['date']}, {meta['gpu']} (driver {meta['driver']}, {meta['cpus']} CPUs, python {meta['python']}); "
        + ", ".join(f"{k} {x}" for k, x in v.items() if k != "quack-kernels")
        + "; quack-kernels "
        + ", ".join(f"{m['versions'].get('quack-kernels', '-')} ({m['group']})" for m, _ in runs)
        + ". vLLM's default config (torch.compile and CUDA graphs on), a tiny random-weight Qwen3-Next "
        "(benchmarks/vllm_engine_start.py, `load_format=dummy`), TP1, `--gdn-prefill-backend` as given (auto: "
        'not given). "DSL off the path": the DSL installed with `pip install --target` (its .pth never read), '
        '`import cutlass` -> ModuleNotFoundError; "healthy": its `dsl_packages` on PYTHONPATH; "SM90 kernel '
        'import fails": healthy, and a sitecustomize makes `import '
        + KERNEL
        + "` raise ImportError in every "
        "process (what a broken native library does; FlashInfer swallows it, nothing the cheap pre-flight reads "
        "shows it). The rows share vLLM's, Triton's, Inductor's and FlashInfer's caches, empty at the first row "
        "(groups run in the order shown); each group has a jitguard cache of its own. Command: `python3 benchmarks/dsl_engine.py run ...`, "
        "then `table`.",
        "",
        "| engine | --gdn-prefill-backend | GDN prefill that served | vLLM warmup failures | ready (s) | first "
        "request | tokens | exit | what jitguard said |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for group_meta, rows in runs:
        for r in rows:
            ready = r.get("ready_s", "-") if "ready_s" in r else "- (never)"
            if r.get("generated"):
                first = f"{r.get('ttft_s', '-')} s"
            elif r.get("died_after_ready"):
                first = "**dead**: " + _message((r.get("death") or "").strip()).replace("|", "/")[:140]
            else:
                first = "-"
            told = [_message(x) for x in r.get("jitguard", []) if not any(n in x for n in ROUTINE)]
            said = "<br>".join(x.replace("|", "/")[:240] for x in told[:2]) or "-"
            served = r.get("gdn_chosen") or "-"
            if any(SWITCHED in x for x in told):
                served += " at the warmup, then Triton/FLA (switched before ready)"
            out.append(
                f"| {r['label']} | {r['gdn_flag']} | {served} | {r.get('warmup_failures', 0)} | "
                f"{ready} | {first} | {r.get('generated', 0)} | {r['exit']} | {said} |"
            )
        if group_meta.get("skipped"):
            out += [
                "",
                f"Not started ({group_meta['group']}: the call's budget was spent): {', '.join(group_meta['skipped'])}.",
            ]
    every = [r for _, rows in runs for r in rows]
    doomed = [r for r in every if r["stock"] and r.get("warmup_failures")]
    guarded = [r for r in every if not r["stock"] and r["gdn_flag"] == "auto"]
    out += [
        "",
        f"Stock: {sum(bool(r.get('died_after_ready')) for r in doomed)} of {len(doomed)} starts whose GDN prefill "
        "cannot run reported ready, then died at the first request. jitguard (auto): "
        f"{sum(bool(r.get('generated')) for r in guarded)} of {len(guarded)} starts served their first request, "
        f"{sum(bool(r.get('died_after_ready')) for r in guarded)} died after ready.",
        "",
        "`import cutlass` in each group's environment: "
        + "; ".join(f"{m['group']}: {m.get('cutlass_import')}" for m, _ in runs),
        "",
    ]
    Path(args.out).write_text("\n".join(out) + "\n")
    print("\n".join(out))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run")
    r.add_argument("--group", choices=sorted(GROUPS), required=True)
    r.add_argument("--site", type=Path, required=True)
    r.add_argument("--quack", type=Path, help="a directory holding quack-kernels (the healthy group)")
    r.add_argument("--work", type=Path, required=True)
    r.add_argument("--out", type=Path, required=True)
    r.add_argument("--budget", type=float, default=560.0, help="seconds for the group (one device call)")
    r.add_argument("--rows", type=int, default=None, help="run only the group's first ROWS rows")
    r.add_argument("--pick", help="run only these rows of the group, e.g. 1,0 (their indexes, in this order)")
    t = sub.add_parser("table")
    t.add_argument("results", nargs="+")
    t.add_argument("--out", required=True)
    args = parser.parse_args()
    run(args) if args.command == "run" else table(args)


if __name__ == "__main__":
    main()
