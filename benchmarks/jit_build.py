"""FlashInfer 0.6.6 GDN prefill build (module gdn_prefill_sm90, 34 TUs): stock ninja vs jitguard's runner.

One configuration per invocation (a full build takes minutes), each a cold build of the same module, appending
one row to ``<out>/jit_build.jsonl`` and rewriting ``<out>/jit_build.md`` from all rows:

    stock    FlashInfer's own generated build.ninja with plain ``ninja -v`` and MAX_JOBS unset (ninja's -j)
    default  the same build through ``jitguard.supervise.runner.run_ninja`` with the default budget
    32g      the same with ``--memory-budget 32G``
    ranks4   4 processes start at once on a cold module through jitguard's FlashInfer hook: one builds, the
             others wait visibly (skipped with a note when the hook is not installed)

Each row: wall time, peak RSS of the build's process tree (sampled every 0.25 s with psutil), the most compiler
front ends (cicc) alive at once, jobs, attempts, and the machine. The ninja file is generated on a GPU-less
compatible path: FLASHINFER_CUDA_ARCH_LIST=9.0a, FLASHINFER_WORKSPACE_BASE=<workspace>,
``flashinfer.jit.gdn.gen_gdn_prefill_sm90_module()`` then ``spec.write_ninja()``.

``--sources K`` keeps K of the 32 generated instance TUs (plus the 2 fixed ones) so that a slow configuration
fits a time limit; use the same K for every configuration you compare. ``--manifest`` benchmarks any other
build.ninja instead (used to check this script without a GPU host).

    python benchmarks/jit_build.py --config stock --out OUT [--workspace DIR] [--sources K] [--max-jobs N]
    python benchmarks/jit_build.py --render --out benchmarks/results   # table from the collected rows
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

SRC = Path(__file__).resolve().parent.parent / "src"
try:
    import jitguard  # noqa: F401
except ImportError:  # a checkout without `pip install -e .`: this process and the rank workers use src/
    sys.path.insert(0, str(SRC))
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(SRC), os.environ.get("PYTHONPATH")) if p)

CONFIGS = ("stock", "default", "32g", "ranks4")
MODULE = "gdn_prefill_sm90"
GIB = 1024**3
_STATUS = re.compile(r"^\[(\d+)/(\d+)\]")


@dataclass
class Sampler:
    """Peak RSS of the descendants of ``roots`` (optionally the roots too), and the most cicc at once."""

    roots: list[int]
    include_roots: bool = False
    interval: float = 0.25
    peak_rss: int = 0
    peak_cicc: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def _once(self) -> None:
        total = cicc = 0
        for root in self.roots:
            try:
                parent = psutil.Process(root)
                procs = parent.children(recursive=True) + ([parent] if self.include_roots else [])
            except psutil.Error:
                continue
            for proc in procs:
                try:
                    total += proc.memory_info().rss
                    cicc += proc.name() == "cicc"
                except psutil.Error:
                    continue
        self.peak_rss = max(self.peak_rss, total)
        self.peak_cicc = max(self.peak_cicc, cicc)

    def _loop(self) -> None:
        while not self._stop.is_set():
            self._once()
            time.sleep(self.interval)

    def __enter__(self) -> Sampler:
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread:
            self._thread.join()


def flashinfer_env(workspace: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["FLASHINFER_CUDA_ARCH_LIST"] = "9.0a"
    env["FLASHINFER_WORKSPACE_BASE"] = str(workspace)
    env.pop("MAX_JOBS", None)
    return env


def generate(workspace: Path, sources: int | None) -> tuple[Path, Path, int]:
    """Write FlashInfer's build.ninja for the GDN module; returns (build dir, manifest to run, TU count)."""
    os.environ.update(flashinfer_env(workspace))
    os.environ.pop("MAX_JOBS", None)
    from flashinfer.jit.gdn import gen_gdn_prefill_sm90_module

    spec = gen_gdn_prefill_sm90_module()
    spec.write_ninja()
    build_dir, manifest = Path(spec.build_dir), Path(spec.ninja_path)
    tus = len(spec.sources)
    if sources is not None and sources < 32:
        manifest, tus = subset(manifest, sources)
    return build_dir, manifest, tus


def subset(manifest: Path, keep_instances: int) -> tuple[Path, int]:
    """A copy of FlashInfer's manifest with only ``keep_instances`` generated instance TUs (+ the fixed two)."""
    lines = manifest.read_text().splitlines()
    kept: list[str] = []
    objects: list[str] = []
    instances = 0
    for line in lines:
        if line.startswith("build ") and ": cuda_compile " in line:
            obj = line[len("build ") : line.index(": cuda_compile ")]
            if "gdn_prefill_kernel_" in Path(obj).name:
                instances += 1
                if instances > keep_instances:
                    continue
            objects.append(obj)
        elif line.startswith("build ") and ": link " in line:
            head = line[: line.index(": link ")]
            line = f"{head}: link " + " ".join(objects)
        kept.append(line)
    out = manifest.with_name(f"build.subset{keep_instances}.ninja")
    out.write_text("\n".join(kept) + "\n")
    return out, len(objects)


def clean(build_dir: Path) -> None:
    """A cold build: no objects, no library, no ninja log (so nothing counts as built)."""
    for path in build_dir.iterdir():
        if path.suffix in (".o", ".so", ".d") or path.name in (".ninja_log", ".ninja_deps"):
            path.unlink()


def steps_done(text: str) -> str:
    found = [m.groups() for line in text.splitlines() if (m := _STATUS.match(line))]
    return f"{found[-1][0]}/{found[-1][1]}" if found else "0/?"


def run_stock(build_dir: Path, manifest: Path, time_box: float, max_jobs: int | None) -> dict[str, Any]:
    env = flashinfer_env(Path(os.environ["FLASHINFER_WORKSPACE_BASE"]))
    ninja = shutil.which("ninja") or "ninja"
    cmd = [ninja, "-v", "-C", str(build_dir.resolve()), "-f", str(manifest.resolve())]
    if max_jobs:  # what FlashInfer does with MAX_JOBS set
        cmd += ["-j", str(max_jobs)]
    start = time.monotonic()
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    with Sampler([os.getpid()]) as sampler:
        try:
            out, _ = proc.communicate(timeout=time_box)
            status = "ok" if proc.returncode == 0 else f"failed (exit {proc.returncode})"
        except subprocess.TimeoutExpired:
            proc.terminate()
            out, _ = proc.communicate()
            status = "time-boxed"
    wall = time.monotonic() - start
    return {
        "wall_s": round(wall, 1),
        "peak_rss_bytes": sampler.peak_rss,
        "max_cicc": sampler.peak_cicc,
        "jobs": f"MAX_JOBS={max_jobs}" if max_jobs else f"ninja default ({_ninja_default_jobs()})",
        "attempts": 1,
        "status": status,
        "steps": steps_done(out),
        "tail": out.splitlines()[-3:] if status != "ok" else [],
    }


def _ninja_default_jobs() -> int:
    cpus = os.cpu_count() or 1
    return 2 if cpus <= 1 else 3 if cpus == 2 else cpus + 2


def run_jitguard(
    build_dir: Path, manifest: Path, budget: str | None, time_box: float, cache: Path
) -> dict[str, Any]:
    from jitguard.config import parse_memory_spec
    from jitguard.errors import BuildFailed
    from jitguard.supervise.runner import BuildOptions, run_ninja

    options = BuildOptions(
        memory_budget=parse_memory_spec(budget) if budget else None,
        timeout=time_box,
        stall_timeout=600,
        progress="log",
        progress_interval=30,
        cache_dir=cache,
        backend="flashinfer",
    )
    start = time.monotonic()
    row: dict[str, Any] = {}
    with Sampler([os.getpid()]) as sampler:
        try:
            result = run_ninja(build_dir, manifest, module=MODULE, options=options)
            row.update(status="ok", jobs=result.jobs, attempts=result.attempts, plan=result.plan_reason)
            row["runner_peak_rss_bytes"] = result.peak_rss_bytes
            row["log"] = str(result.log_path)
        except BuildFailed as exc:
            codes = [f.code for f in exc.findings]
            row.update(
                status="time-boxed" if codes == ["build-timeout"] else f"failed {codes}", log=exc.log_path
            )
            if exc.log_path:
                row["steps"] = steps_done(Path(exc.log_path).read_text(errors="replace"))
    row.update(
        wall_s=round(time.monotonic() - start, 1), peak_rss_bytes=sampler.peak_rss, max_cicc=sampler.peak_cicc
    )
    row.setdefault("steps", "done" if row["status"] == "ok" else "?")
    return row


WORKER = r"""
import json, logging, os, sys, time
start = time.monotonic()
logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", stream=sys.stderr)
import jitguard
assert jitguard.install(), "jitguard's FlashInfer hook did not install"
from flashinfer.jit.gdn import gen_gdn_prefill_sm90_module
from jitguard.flashinfer_jit.flashinfer_build import build_spec
spec = gen_gdn_prefill_sm90_module()
built = build_spec(spec, load=None)  # the hook's engine; loading needs no GPU work to measure the build
print(json.dumps({"rank": int(sys.argv[1]), "status": built.status, "waited_s": round(built.waited_s, 1),
                  "took_over_from": built.took_over_from_pid, "wall_s": round(time.monotonic() - start, 1)}))
"""


def run_ranks(build_dir: Path, manifest: Path, ranks: int, time_box: float, cache: Path) -> dict[str, Any]:
    try:
        import jitguard.flashinfer_jit.flashinfer_build
        import jitguard.integrations.flashinfer_hook  # noqa: F401
    except ImportError as exc:
        return {"status": f"skipped: jitguard's FlashInfer hook is not available ({exc})"}
    if manifest.name != "build.ninja":
        # FlashInfer builds its own build.ninja: make the subset the module's manifest for this run.
        shutil.copy(manifest, build_dir / "build.ninja")
    env = {**flashinfer_env(Path(os.environ["FLASHINFER_WORKSPACE_BASE"])), "JITGUARD_CACHE_DIR": str(cache)}
    env["JITGUARD_BUILD_TIMEOUT"] = str(int(time_box))
    start = time.monotonic()
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WORKER, str(rank)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for rank in range(ranks)
    ]
    with (
        Sampler([p.pid for p in procs]) as compile_tree,
        Sampler([p.pid for p in procs], include_roots=True) as all_,
    ):
        outputs = [p.communicate(timeout=time_box + 120) for p in procs]
    wall = time.monotonic() - start
    per_rank = []
    for proc, (out, err) in zip(procs, outputs, strict=True):
        info = json.loads(out.strip().splitlines()[-1]) if proc.returncode == 0 and out.strip() else {}
        info["exit"] = proc.returncode
        info["wait_lines"] = sum("waiting for the build" in line for line in err.splitlines())
        if proc.returncode != 0:
            info["stderr_tail"] = err.splitlines()[-5:]
        per_rank.append(info)
    built = sum(1 for r in per_rank if r.get("status") == "built")
    ok = all(r["exit"] == 0 for r in per_rank)
    return {
        "status": "ok" if ok and built == 1 else "failed",
        "wall_s": round(wall, 1),
        "peak_rss_bytes": compile_tree.peak_rss,
        "peak_rss_with_interpreters_bytes": all_.peak_rss,
        "max_cicc": compile_tree.peak_cicc,
        "ranks": per_rank,
        "builders": built,
        "attempts": 1,
        "jobs": "default budget",
    }


def machine() -> dict[str, Any]:
    def first_line(cmd: list[str]) -> str:
        try:
            out = subprocess.run(cmd, capture_output=True, text=True, timeout=30).stdout.strip().splitlines()
            return out[-1] if out else "-"
        except (OSError, subprocess.TimeoutExpired):
            return "-"

    from importlib.metadata import PackageNotFoundError, version

    def pkg(name: str) -> str:
        try:
            return version(name)
        except PackageNotFoundError:
            return "-"

    return {
        "host": socket.gethostname(),
        "cpus": os.cpu_count(),
        "mem_total_gib": round(psutil.virtual_memory().total / GIB, 1),
        "python": platform.python_version(),
        "flashinfer": pkg("flashinfer-python"),
        "jitguard": pkg("jitguard"),
        "ninja": first_line(["ninja", "--version"]),
        "nvcc": first_line([os.environ.get("CUDA_HOME", "/usr/local/cuda") + "/bin/nvcc", "--version"]),
    }


def write_markdown(out: Path) -> None:
    rows = [json.loads(line) for line in (out / "jit_build.jsonl").read_text().splitlines() if line.strip()]
    lines = [
        "# FlashInfer 0.6.6 GDN prefill build: stock ninja vs jitguard",
        "",
        "Generated by `benchmarks/jit_build.py` (one configuration per run; cold build each time). Peak RSS is the",
        "sum over the build's process tree, sampled every 0.25 s; `cicc` is the most compiler front ends at once.",
        "",
        "| config | TUs | jobs | wall (s) | peak tree RSS (GiB) | max cicc | attempts | status | machine |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        m = r.get("machine", {})
        peak = r.get("peak_rss_bytes")
        lines.append(
            f"| {r['config']} | {r.get('tus', '-')} | {r.get('jobs', '-')} | {r.get('wall_s', '-')} | "
            f"{peak / GIB:.1f} | {r.get('max_cicc', '-')} | {r.get('attempts', '-')} | {r.get('status')} | "
            f"{m.get('host')} {m.get('cpus')} CPUs {m.get('mem_total_gib')} GiB |"
            if isinstance(peak, int)
            else f"| {r['config']} | {r.get('tus', '-')} | - | - | - | - | - | {r.get('status')} | {m.get('host')} |"
        )
    if rows:
        m = rows[-1].get("machine", {})
        lines += [
            "",
            f"Versions (last row): flashinfer {m.get('flashinfer')}, jitguard {m.get('jitguard')}, "
            f"ninja {m.get('ninja')}, nvcc `{m.get('nvcc')}`, Python {m.get('python')}.",
        ]
        ranks = [r for r in rows if r["config"] == "ranks4" and r.get("ranks")]
        if ranks:
            lines += [
                "",
                "ranks4, per process (last run):",
                "",
                "| rank | status | waited (s) | wait log lines |",
                "|---|---|---|---|",
            ]
            for rk in ranks[-1]["ranks"]:
                lines.append(
                    f"| {rk.get('rank')} | {rk.get('status')} | {rk.get('waited_s')} | {rk.get('wait_lines')} |"
                )
    (out / "jit_build.md").write_text("\n".join(lines) + "\n")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", choices=CONFIGS)
    parser.add_argument("--out", type=Path, required=True, help="results dir (jit_build.jsonl, jit_build.md)")
    parser.add_argument(
        "--render", action="store_true", help="only rewrite jit_build.md from jit_build.jsonl"
    )
    parser.add_argument(
        "--max-jobs", type=int, default=None, help="stock only: run ninja -j N (as MAX_JOBS=N)"
    )
    parser.add_argument("--workspace", type=Path, default=Path("/tmp/jitguard-bench/workspace"))
    parser.add_argument("--sources", type=int, default=None, help="keep K of the 32 instance TUs (0-32)")
    parser.add_argument("--manifest", type=Path, default=None, help="benchmark this build.ninja instead")
    parser.add_argument("--time-box", type=float, default=570, help="stop a build after this many seconds")
    parser.add_argument("--no-clean", action="store_true", help="do not delete earlier outputs first")
    args = parser.parse_args()
    if args.render:
        write_markdown(args.out)
        return 0
    if not args.config:
        parser.error("--config is required (or --render)")

    args.out.mkdir(parents=True, exist_ok=True)
    args.workspace.mkdir(parents=True, exist_ok=True)
    cache = args.workspace.parent / f"jitguard-cache-{args.config}-{os.getpid()}"
    if args.manifest:
        manifest = args.manifest.resolve()
        build_dir, tus = (
            manifest.parent,
            sum(1 for line in manifest.read_text().splitlines() if line.startswith("build ")),
        )
        os.environ.update(flashinfer_env(args.workspace))
    else:
        build_dir, manifest, tus = generate(args.workspace, args.sources)
    if not args.no_clean:
        clean(build_dir)
    print(f"jit_build: {args.config}: {tus} TUs, {manifest}", file=sys.stderr, flush=True)

    if args.config == "stock":
        row = run_stock(build_dir, manifest, args.time_box, args.max_jobs)
    elif args.config == "default":
        row = run_jitguard(build_dir, manifest, None, args.time_box, cache)
    elif args.config == "32g":
        row = run_jitguard(build_dir, manifest, "32G", args.time_box, cache)
    else:
        row = run_ranks(build_dir, manifest, 4, args.time_box, cache)
    config = f"stock -j{args.max_jobs}" if args.config == "stock" and args.max_jobs else args.config
    row = {
        "config": config,
        "tus": tus,
        **row,
        "machine": machine(),
        "date": time.strftime("%Y-%m-%d %H:%M"),
    }
    with open(args.out / "jit_build.jsonl", "a") as f:
        f.write(json.dumps(row) + "\n")
    write_markdown(args.out)
    print(json.dumps(row, indent=2))
    return 0 if row["status"] == "ok" else 1


if __name__ == "__main__":
    raise SystemExit(main())
