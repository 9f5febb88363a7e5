"""A real vLLM engine on the H200 host, stock beside jitguard, with FlashInfer made to fail for real.

Scenarios (each engine in its own session under a time limit, killed with its whole tree afterwards):

  gdn     libcuda unlinkable (its dev symlink and the toolkit's stub hidden; the runtime libcuda.so.1 stays):
          stock auto (FlashInfer's GDN build runs until the limit), jitguard auto (Triton/FLA), jitguard
          ``--gdn-prefill-backend flashinfer`` (stops at init); the sampler off (VLLM_USE_FLASHINFER_SAMPLER=0)
  sampler GDN on Triton, vLLM's default sampler (FlashInfer's): libcuda unlinkable (stock compiles the sampling
          module, then its link fails; jitguard takes PyTorch's sampler at init) and, with libcuda back, a build
          that fails at its first nvcc call (FLASHINFER_EXTRA_CUDAFLAGS=<a flag nvcc rejects>): stock dies,
          jitguard fails over at first use, and its next start takes PyTorch's sampler at once; named
          (VLLM_USE_FLASHINFER_SAMPLER=1) with libcuda unlinkable stops at init

Each row: exit (status, or the limit), seconds to the first line that says what happens with FlashInfer (a
jitguard verdict, or stock's error), seconds until the engine was ready, time to first token, the lines that
matter from the log, the most compilers alive at once and the objects built, and the fingerprint jitguard
logged. Results go to ``$OUT/vllm_engine.<stage>.json`` and ``$OUT/vllm_engine.md``; each stage's rows are
also kept in /tmp/jitguard-vllm-engine-results, so two calls (one stage each, the host still warm) give one
table with both.

    PYTHONPATH=$PWD/src:/tmp/site python3 benchmarks/vllm_engine.py [--stage all|gdn|sampler] [--out DIR]

Needs vLLM 0.22-0.26 (``../shared/gpu-e2e/make_payload.sh``) and root (hiding libcuda); ~4 minutes a stage.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

BROKEN_NVCC_FLAG = "--jitguard-bench-no-such-nvcc-flag"
HIDDEN = ".jitguard-hidden"
LEDGER = Path("/tmp/jitguard-bench-hidden-libcuda.json")  # what is hidden now, for a run killed hard
START = Path(__file__).with_name("vllm_engine_start.py")  # one engine start, and the model it serves
KEPT = Path("/tmp/jitguard-vllm-engine-results")  # each stage's rows, across calls while the host stays warm
# Lines worth keeping from an engine's log (jitguard's, FlashInfer's JIT, and the errors that end a start).
KEEP = re.compile(
    r"jitguard: |JIT-compiled|cannot find -l|Build of |ninja: build stopped|Error|error:|Using .* (GDN|sampl)"
    r"|FlashInfer top-p|nvcc fatal",
)
VERDICT = re.compile(
    r"jitguard: (vLLM chose|FlashInfer .* was requested|FlashInfer .* failed on first use)|cannot find -lcuda"
    r"|nvcc fatal|Build of \S+ failed|ninja: build stopped"
)


@dataclass
class Row:
    stage: str
    name: str
    jitguard: bool
    expect: str
    limit_s: int
    exit: str = ""
    verdict_s: float | None = None
    ready_s: float | None = None
    ttft_s: float | None = None
    generated: int | None = None
    peak_compilers: int = 0
    objects_built: int = 0
    fingerprints: list[str] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)
    ok: bool = False


# ---- one engine start -------------------------------------------------------------------------------------
def run_engine(row: Row, model: Path, env: dict[str, str], gdn: str, sampling: str, workspace: Path) -> Row:
    """Start one engine in its own session under ``row.limit_s`` and read its log as it comes."""
    started = time.monotonic()
    proc = subprocess.Popen(
        [
            "timeout",
            "-k",
            "5",
            str(row.limit_s),
            sys.executable,
            str(START),
            "serve",
            str(model),
            gdn,
            sampling,
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        text=True,
        start_new_session=True,
    )
    assert proc.stdout is not None
    reader = threading.Thread(target=_read, args=(proc, row, started), daemon=True)
    reader.start()
    while proc.poll() is None:  # the most compilers of this engine alive at once (a build in progress)
        row.peak_compilers = max(row.peak_compilers, _count_compilers(proc.pid))
        time.sleep(2)
    status = proc.returncode
    row.objects_built = _objects(workspace)
    _kill_session(proc.pid)
    reader.join(10)
    row.exit = "limit" if status in (124, 137, -9) else str(status)
    row.ok = _meets(row)
    return row


def _read(proc: subprocess.Popen[str], row: Row, started: float) -> None:
    assert proc.stdout is not None
    for raw in proc.stdout:
        line = raw.rstrip()
        now = time.monotonic() - started
        if line.startswith("BENCH READY"):
            row.ready_s = round(now, 1)
        elif line.startswith("BENCH TTFT"):
            row.ttft_s = round(float(line.split()[-1]), 3)
        elif line.startswith("BENCH GENERATED"):
            row.generated = int(line.split()[-1])
        if row.verdict_s is None and VERDICT.search(line):
            row.verdict_s = round(now, 1)
        row.fingerprints += [
            fp for fp in re.findall(r"\(fingerprint ([0-9a-f]{16})\)", line) if fp not in row.fingerprints
        ]
        if KEEP.search(line) and len(row.lines) < 12:
            row.lines.append(f"[{now:6.1f} s] {line[:400]}")


def _meets(row: Row) -> bool:
    served = row.exit == "0" and row.generated == 8
    return {"serves": served, "stops": row.exit not in ("0", "limit"), "fails or hangs": not served}[
        row.expect
    ]


def _session_pids(sid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[3]) == sid:  # field 6 of /proc/PID/stat: the session id
            found.append(int(entry.name))
    return found


def _count_compilers(sid: int) -> int:
    count = 0
    for pid in _session_pids(sid):
        try:
            count += Path(f"/proc/{pid}/comm").read_text().strip() in ("cicc", "ptxas", "nvcc", "cudafe++")
        except OSError:
            continue
    return count


def _kill_session(sid: int) -> None:
    """Kill every process of the engine's session by id (an engine core, FlashInfer's compilers)."""
    for _ in range(3):
        pids = _session_pids(sid)
        if not pids:
            return
        for pid in pids:
            with suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.5)


def _objects(workspace: Path) -> int:
    return sum(1 for _ in workspace.rglob("*.cuda.o")) if workspace.exists() else 0


# ---- libcuda made unlinkable for real ---------------------------------------------------------------------
def libcuda_the_linker_takes(env: dict[str, str]) -> Path | None:
    """The ``libcuda.so`` FlashInfer's link line takes here: a real link with FlashInfer's flags (read from
    jitguard's facts) and ``-Wl,--trace``, which names every library file the linker opened."""
    link = doctor_json(env)["facts"]["link"]
    with tempfile.TemporaryDirectory() as tmp:
        source = Path(tmp) / "probe.c"
        source.write_text("int jitguard_probe(void) { return 0; }\n")
        command = [
            *link["cxx"],
            "-shared",
            "-fPIC",
            str(source),
            *link["ldflags"],
            "-o",
            f"{tmp}/p.so",
            "-Wl,--trace",
        ]
        traced = subprocess.run(command, env=env, capture_output=True, text=True, timeout=60)
    for line in (traced.stdout + traced.stderr).splitlines():
        found = re.search(r"(/\S*/libcuda\.so)\)?\s*$", line)
        if found:
            return Path(found.group(1))
    return None


def doctor_json(env: dict[str, str]) -> dict[str, Any]:
    """``jitguard doctor --json`` in ``env``: jitguard's real facts (its trial link included) and findings."""
    command = [sys.executable, "-m", "jitguard", "doctor", "--json"]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)
    payload: dict[str, Any] = json.loads(done.stdout)
    return payload


def doomed_link(env: dict[str, str]) -> bool:
    codes = [f["code"] for f in doctor_json(env)["backends"]["flashinfer"]["findings"]]
    return "link-missing-libcuda" in codes


@contextmanager
def libcuda_hidden(env: dict[str, str]) -> Iterator[list[str]]:
    """Rename the linkable ``libcuda.so`` files (restored on exit, whatever happens); yields what was hidden."""
    moved: list[tuple[Path, Path]] = []
    try:
        for _ in range(6):  # the dev link, the toolkit's stub, ...: one at a time, as the linker finds them
            path = libcuda_the_linker_takes(env)
            if path is None or path.name != "libcuda.so" or _runtime_behind(path):
                break  # never what libcuda.so.1 (the runtime the engine needs) resolves to
            target = path.with_name(path.name + HIDDEN)
            os.rename(path, target)
            moved.append((path, target))
            LEDGER.write_text(json.dumps([str(p) for p, _ in moved]))
        yield [str(p) for p, _ in moved]
    finally:
        for path, target in reversed(moved):
            if target.exists() and not (path.exists() or path.is_symlink()):
                os.rename(target, path)
        LEDGER.unlink(missing_ok=True)


def _runtime_behind(path: Path) -> bool:
    """Whether a ``libcuda.so.*`` beside ``path`` resolves to ``path`` itself (renaming it would break the
    runtime): a dev symlink or a stub is safe to hide, the driver's library file is not."""
    if path.is_symlink():
        return False
    real = os.path.realpath(path)
    return any(os.path.realpath(other) == real for other in path.parent.glob("libcuda.so.*"))


def restore_leftovers() -> None:
    """A run killed hard may have left libcuda hidden: put back what the ledger names."""
    try:
        paths = json.loads(LEDGER.read_text())
    except (OSError, ValueError):
        return
    for name in paths:
        path = Path(name)
        hidden = path.with_name(path.name + HIDDEN)
        if hidden.exists() and not (path.exists() or path.is_symlink()):
            os.rename(hidden, path)
    LEDGER.unlink(missing_ok=True)


# ---- the scenarios ----------------------------------------------------------------------------------------
def base_env(work: Path, name: str, *, jitguard: bool, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("JITGUARD_")}
    env.update(
        JITGUARD_CACHE_DIR=str(work / f"{name}-cache"),
        FLASHINFER_WORKSPACE_BASE=str(work / f"{name}-workspace"),
        PYTHONUNBUFFERED="1",
        **extra,
    )
    if not jitguard:
        env["JITGUARD_DISABLE"] = "1"
    return env


def gdn_stage(work: Path, model: Path, notes: list[str]) -> list[Row]:
    rows: list[Row] = []
    plan = [
        ("stock, auto", False, "auto", "fails or hangs", 75),
        ("jitguard, auto", True, "auto", "serves", 300),
        ("jitguard, --gdn-prefill-backend flashinfer", True, "flashinfer", "stops", 150),
    ]
    probe = base_env(work, "gdn-probe", jitguard=True)
    with libcuda_hidden(probe) as hidden:
        notes.append(f"gdn: hidden for the link: {', '.join(hidden) or 'nothing found'}")
        if not doomed_link(probe):
            notes.append("gdn: skipped, -lcuda still links here")
            return rows
        for i, (name, jitguard, gdn, expect, limit) in enumerate(plan):
            env = base_env(work, f"gdn-{i}", jitguard=jitguard, VLLM_USE_FLASHINFER_SAMPLER="0")
            row = Row("gdn: libcuda unlinkable", name, jitguard, expect, limit)
            rows.append(run_engine(row, model, env, gdn, "greedy", Path(env["FLASHINFER_WORKSPACE_BASE"])))
            print(_line(rows[-1]), flush=True)
    return rows


def sampler_stage(work: Path, model: Path, notes: list[str]) -> list[Row]:
    rows: list[Row] = []

    def start(stage: str, name: str, jitguard: bool, expect: str, limit: int, env: dict[str, str]) -> None:
        row = Row(stage, name, jitguard, expect, limit)
        rows.append(run_engine(row, model, env, "triton", "top", Path(env["FLASHINFER_WORKSPACE_BASE"])))
        print(_line(rows[-1]), flush=True)

    probe = base_env(work, "sampler-probe", jitguard=True)
    with libcuda_hidden(probe) as hidden:
        notes.append(f"sampler: hidden for the link: {', '.join(hidden) or 'nothing found'}")
        if doomed_link(probe):
            stage = "sampler: libcuda unlinkable"
            start(
                stage,
                "stock, default sampler",
                False,
                "fails or hangs",
                180,
                base_env(work, "s0", jitguard=False),
            )
            start(
                stage, "jitguard, default sampler", True, "serves", 180, base_env(work, "s1", jitguard=True)
            )
            named = base_env(work, "s2", jitguard=True, VLLM_USE_FLASHINFER_SAMPLER="1")
            start(stage, "jitguard, VLLM_USE_FLASHINFER_SAMPLER=1", True, "stops", 150, named)
        else:
            notes.append("sampler: libcuda scenarios skipped, -lcuda still links here")
    stage = "sampler: its build fails at the first nvcc"
    broken = {"FLASHINFER_EXTRA_CUDAFLAGS": BROKEN_NVCC_FLAG}
    start(stage, "stock", False, "fails or hangs", 180, base_env(work, "s3", jitguard=False, **broken))
    again = base_env(work, "s4", jitguard=True, **broken)
    start(stage, "jitguard, first start", True, "serves", 180, again)
    start(stage, "jitguard, next start (recorded)", True, "serves", 180, again)
    return rows


# ---- results ----------------------------------------------------------------------------------------------
def _line(row: Row) -> str:
    return (
        f"{row.stage} | {row.name}: exit {row.exit}, verdict {row.verdict_s} s, ready {row.ready_s} s, "
        f"ttft {row.ttft_s} s, {'as expected' if row.ok else 'NOT as expected'} ({row.expect})"
    )


def machine() -> dict[str, Any]:
    info: dict[str, Any] = {
        "host": platform.node(),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
    }
    try:
        smi = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=10,
        )  # fmt: skip
        info["gpu"] = smi.stdout.strip()
    except (OSError, subprocess.SubprocessError):
        info["gpu"] = None
    from importlib import metadata

    for name in ("vllm", "flashinfer-python", "torch", "triton", "jitguard"):
        try:
            info[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            info[name] = None
    return info


def render(rows: list[Row], info: dict[str, Any], notes: list[str]) -> str:
    out = [
        "# vLLM engine starts: stock beside jitguard, FlashInfer doomed for real",
        "",
        f"Produced by `benchmarks/vllm_engine.py` on {info.get('gpu')} ({info.get('cpus')} CPUs): vLLM "
        f"{info.get('vllm')}, flashinfer-python {info.get('flashinfer-python')}, torch {info.get('torch')}, "
        f"triton {info.get('triton')}. A 4-layer Qwen3-Next with dummy weights, TP1, eager, Triton attention.",
        "Times in seconds from the engine's start: the first line saying what happens with FlashInfer (a "
        "jitguard verdict or stock's error), engine ready, time to first token (1-token generate).",
        "",
        "| scenario | engine | exit | verdict | ready | TTFT | compilers (objects built) | as expected |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        exit_ = f"killed at {r.limit_s} s" if r.exit == "limit" else r.exit
        out.append(
            f"| {r.stage} | {r.name} | {exit_} | {_n(r.verdict_s)} | {_n(r.ready_s)} | {_n(r.ttft_s)} | "
            f"{r.peak_compilers} ({r.objects_built}) | {'yes' if r.ok else 'NO'} ({r.expect}) |"
        )
    out += ["", "## What the logs said", ""]
    for r in rows:
        out += [
            f"**{r.stage}, {r.name}** (fingerprints logged: {', '.join(r.fingerprints) or 'none'})",
            "",
            "```",
        ]
        out += r.lines or ["(nothing matched)"]
        out += ["```", ""]
    if notes:
        out += ["## Notes", "", *(f"- {n}" for n in notes), ""]
    return "\n".join(out)


def _n(value: float | None) -> str:
    return "-" if value is None else f"{value:g}"


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--stage", choices=("all", "gdn", "sampler"), default="all")
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "/tmp/out")))
    args = parser.parse_args()
    if shutil.which("timeout") is None:
        print("vllm_engine.py: needs coreutils' timeout", file=sys.stderr)
        return 2
    restore_leftovers()
    args.out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="jitguard-vllm-engine-"))
    model = work / "qwen3-next-tiny"
    subprocess.run([sys.executable, str(START), "model", str(model)], check=True)
    info = machine()
    stages = ("gdn", "sampler") if args.stage == "all" else (args.stage,)
    ok = True
    for stage in stages:  # one file per stage, so two calls (one stage each) make one table
        notes: list[str] = []
        started = time.monotonic()
        rows = (gdn_stage if stage == "gdn" else sampler_stage)(work, model, notes)
        notes.append(f"stage {stage}: {time.monotonic() - started:.0f} s")
        ok = ok and all(r.ok for r in rows)
        record = {"machine": info, "notes": notes, "rows": [asdict(r) for r in rows]}
        KEPT.mkdir(parents=True, exist_ok=True)
        (KEPT / f"vllm_engine.{stage}.json").write_text(json.dumps(record, indent=2) + "\n")
    table: list[Row] = []
    remarks: list[str] = []
    for stage in ("gdn", "sampler"):  # this call's stages and an earlier call's, kept while the host is warm
        path = KEPT / f"vllm_engine.{stage}.json"
        if path.exists():
            record = json.loads(path.read_text())
            table += [Row(**r) for r in record["rows"]]
            remarks += record["notes"]
            shutil.copy(path, args.out / path.name)
    (args.out / "vllm_engine.md").write_text(render(table, info, remarks) + "\n")
    print(f"wrote {args.out}/vllm_engine.md ({sum(r.ok for r in table)}/{len(table)} as expected)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
