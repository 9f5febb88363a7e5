"""Build once for the fleet: a second "host" with an empty workspace building the same FlashInfer module,
through sccache and through the artifact store, against the first host's cold build.

Every build is one fresh process (a "host": its own FlashInfer workspace and jitguard cache dir) running
jitguard's guarded FlashInfer build (``flashinfer_jit.flashinfer_build.build_spec``, what the engine hook runs),
so nothing is warm in memory. Scenarios:

    cold            empty workspace, no compiler cache, no store: the baseline
    sccache-first   the first host with sccache on (fills the cache; shows sccache's cost on a miss)
    sccache-second  a second host, empty workspace at the same path (a fleet runs one image), empty jitguard
                    cache, a fresh sccache server: the objects come from sccache's backend
    publish         the cold host publishes its module to a file:// store
    store-second    a second host, another workspace path, fetches the module from the store

Measured per build: the wall time and CPU time (user + system, this process and every process it reaped:
ninja, the compilers, the sccache server) of the build step (``build_spec``), and of the whole process
(including Python start and ``import flashinfer``, the same with or without jitguard). Redis runs as a
service: its own CPU is not counted.

    python benchmarks/fleet.py all --module rope --out benchmarks/results        # the CPU machine, redis
    python benchmarks/fleet.py run --module gdn --scenario cold --out OUT          # one stage (the H200)
    python benchmarks/fleet.py render --out OUT

``--module rope`` is FlashInfer 0.6.6's RoPE module (2 TUs: a real nvcc project that compiles on a CPU host);
``--module gdn`` is the GDN prefill module (34 TUs; ``--sources K`` keeps K of its 32 instance TUs).
``--sccache-backend redis`` starts a redis-server on 127.0.0.1 for the run (``all`` only: the server lives as
long as this process); ``disk`` uses SCCACHE_DIR under the work root, which survives between ``run`` stages.
On a host without libcuda (a CPU build machine) a link stub is built with gcc, as the tests do.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import resource
import shutil
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

SRC = Path(__file__).resolve().parent.parent / "src"
try:
    import jitguard  # noqa: F401
except ImportError:  # a checkout without `pip install -e .`: this process and the hosts use src/
    sys.path.insert(0, str(SRC))
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(SRC), os.environ.get("PYTHONPATH")) if p)

SCENARIOS = ("cold", "sccache-first", "sccache-second", "publish", "store-second")
ROWS = "fleet.jsonl"
TABLE = "fleet.md"
STUB = "int cuInit(unsigned int f) { (void)f; return 0; }\nint cuDriverGetVersion(int *v) { *v = 13000; return 0; }\n"


# -- one host: a fresh process --------------------------------------------------------------------------


def _cpu() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    reaped = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + reaped.ru_utime + reaped.ru_stime


def _spec(module: str, sources: int | None) -> Any:
    if module == "rope":
        from flashinfer.jit.rope import gen_rope_module

        return gen_rope_module()
    from flashinfer.jit.gdn import gen_gdn_prefill_sm90_module

    spec = gen_gdn_prefill_sm90_module()
    if sources is not None:
        # The generated instances (gdn_prefill_kernel_<dtype>_g<..>.cu) and the two fixed files.
        instances = [s for s in spec.sources if s.name.startswith("gdn_prefill_kernel_")]
        fixed = [s for s in spec.sources if s not in instances]
        spec.sources = instances[:sources] + fixed
    return spec


def host(module: str, sources: int | None, publish: str | None) -> dict[str, Any]:
    """Build (or fetch) the module in this process's workspace; what happened, timed."""
    from jitguard.flashinfer_jit.flashinfer_build import build_spec

    spec = _spec(module, sources)
    started, cpu = time.monotonic(), _cpu()
    built = build_spec(spec, load=None, publish=publish)
    step_wall, step_cpu = time.monotonic() - started, _cpu() - cpu
    result = built.result
    return {
        "status": built.status,
        "tus": len(spec.sources),
        "jobs": result.jobs if result else 0,
        "step_wall_s": round(step_wall, 3),
        "step_cpu_s": round(step_cpu, 3),
        "objects": len(list(Path(spec.build_dir).glob("*.o"))),
        "compiler_cache": result.compiler_cache.to_json() if result and result.compiler_cache else None,
        "shared": [o.to_json() for o in built.shared],
        "so_bytes": built.so_path.stat().st_size,
        "compile_ms": _compile_times(Path(spec.build_dir)),
    }


def _compile_times(build_dir: Path) -> list[int]:
    """How long each compile command ran (ninja's log: start and end in ms): under the compiler cache, how
    long each held its compile slot."""
    try:
        lines = (build_dir / ".ninja_log").read_text().splitlines()
    except OSError:
        return []
    times = []
    for line in lines:
        fields = line.split("\t")
        if len(fields) >= 4 and fields[3].endswith(".o") and fields[0].isdigit() and fields[1].isdigit():
            times.append(int(fields[1]) - int(fields[0]))
    return sorted(times)


# -- the driver -----------------------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def _redis(root: Path) -> Iterator[str]:
    binary = shutil.which("redis-server")
    if binary is None:
        raise SystemExit("--sccache-backend redis needs redis-server (apt-get install redis-server)")
    port = _free_port()
    root.mkdir(parents=True, exist_ok=True)
    argv = [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
    with open(root / "redis.log", "wb") as log:
        proc = subprocess.Popen([*argv, "--dir", str(root)], stdout=log, stderr=subprocess.STDOUT)
    try:
        for _ in range(100):
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.5):
                break
            time.sleep(0.1)
        yield f"redis://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def _cuda_home() -> Path:
    for candidate in (os.environ.get("CUDA_HOME"), "/usr/local/cuda-13.0", "/usr/local/cuda"):
        if candidate and (Path(candidate) / "bin" / "nvcc").exists():
            return Path(candidate)
    raise SystemExit("no CUDA toolkit (set CUDA_HOME)")


def _link_flags(root: Path, cuda_home: Path) -> str | None:
    """FLASHINFER_EXTRA_LDFLAGS for a host whose linker cannot find libcuda: a link stub built with gcc."""
    probe = subprocess.run(
        [
            "c++",
            "-shared",
            "-x",
            "c++",
            "/dev/null",
            f"-L{cuda_home}/lib64",
            f"-L{cuda_home}/lib64/stubs",
            "-lcuda",
            "-o",
            os.devnull,
        ],
        capture_output=True,
    )
    if probe.returncode == 0:
        return None
    stub = root / "stub"
    stub.mkdir(parents=True, exist_ok=True)
    (stub / "stub.c").write_text(STUB)
    subprocess.run(
        [
            "gcc",
            "-shared",
            "-fPIC",
            "-Wl,-soname,libcuda.so.1",
            str(stub / "stub.c"),
            "-o",
            str(stub / "libcuda.so"),
        ],
        check=True,
    )
    return f"-L{stub}"


def _base_env(root: Path) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("JITGUARD_", "FLASHINFER_", "SCCACHE_", "MAX_JOBS"))
    }
    cuda_home = _cuda_home()
    env.update({"FLASHINFER_CUDA_ARCH_LIST": "9.0a", "CUDA_HOME": str(cuda_home), "PYTHONUNBUFFERED": "1"})
    flags = _link_flags(root, cuda_home)
    if flags:
        env["FLASHINFER_EXTRA_LDFLAGS"] = flags
    return env


def _run_host(
    args: argparse.Namespace, env: dict[str, str], name: str, *, publish: str | None = None
) -> dict[str, Any]:
    root = Path(args.work)
    env = dict(env)
    env.setdefault("FLASHINFER_WORKSPACE_BASE", str(root / name / "workspace"))
    env["JITGUARD_CACHE_DIR"] = str(root / name / "jitguard-cache")
    argv = [sys.executable, __file__, "host", "--module", args.module]
    if args.sources is not None:
        argv += ["--sources", str(args.sources)]
    if publish:
        argv += ["--publish", publish]
    started = time.monotonic()
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out, err = proc.communicate(timeout=args.timeout)
    wall = time.monotonic() - started
    if proc.returncode != 0:
        raise SystemExit(f"host {name} failed ({proc.returncode}):\n{out[-3000:]}\n{err[-3000:]}")
    row: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    row["process_wall_s"] = round(wall, 3)
    return row


def _process_cpu_since(before: resource.struct_rusage) -> float:
    now = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (now.ru_utime - before.ru_utime) + (now.ru_stime - before.ru_stime)


def _scenario(args: argparse.Namespace, scenario: str, env: dict[str, str], repeat: int) -> dict[str, Any]:
    root = Path(args.work)
    store = f"file://{root / 'store'}"
    (root / "store").mkdir(parents=True, exist_ok=True)
    env = dict(env)
    redis = env.pop("SCCACHE_REDIS_ENDPOINT", None)
    env["JITGUARD_COMPILER_CACHE"] = "off"
    publish = None
    if scenario == "cold":
        name = f"cold-{repeat}"
        shutil.rmtree(root / name, ignore_errors=True)
    elif scenario.startswith("sccache"):
        env["JITGUARD_COMPILER_CACHE"] = "sccache"
        if redis:
            env["SCCACHE_REDIS_ENDPOINT"] = redis
        if args.sccache_backend == "disk":
            env["SCCACHE_DIR"] = str(root / "sccache-disk")
            if scenario == "sccache-first":
                shutil.rmtree(root / "sccache-disk", ignore_errors=True)
        # Every sccache host uses the same workspace path (the preprocessed sources name it), emptied first.
        name = f"{scenario}-{repeat}"
        env["FLASHINFER_WORKSPACE_BASE"] = str(root / "sccache-workspace")
        shutil.rmtree(root / "sccache-workspace", ignore_errors=True)
        shutil.rmtree(root / name, ignore_errors=True)
    elif scenario == "publish":
        name = "cold-0"  # the module the first cold build left, now published
        publish = store
    else:
        name = f"store-second-{repeat}"
        shutil.rmtree(root / name, ignore_errors=True)
        env["JITGUARD_SHARE"] = store
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    load = os.getloadavg()[0]
    row = _run_host(args, env, name, publish=publish)
    row.update(
        {
            "scenario": scenario,
            "repeat": repeat,
            "module": args.module,
            "sccache_backend": args.sccache_backend if scenario.startswith("sccache") else None,
            "process_cpu_s": round(_process_cpu_since(before), 3),
            "load_before": round(load, 2),
            "machine": _machine(),
            "when": time.strftime("%Y-%m-%d %H:%M:%S"),
        }
    )
    return row


def _machine() -> str:
    import psutil

    return f"{socket.gethostname()} {os.cpu_count()} CPUs {psutil.virtual_memory().total / 1024**3:.1f} GiB"


def _versions() -> dict[str, str]:
    import importlib.metadata

    def version(name: str) -> str:
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            return "-"

    def tool(argv: list[str]) -> str:
        try:
            text = subprocess.run(argv, capture_output=True, text=True, timeout=30).stdout.strip()
        except OSError:
            return "-"
        return text.splitlines()[-1] if text else "-"

    return {
        "flashinfer": version("flashinfer-python"),
        "fsspec": version("fsspec"),
        "sccache": tool(
            [shutil.which("sccache") or str(Path(sys.executable).parent / "sccache"), "--version"]
        ),
        "redis": tool(["redis-server", "--version"]).split(" sha=")[0],
        "nvcc": tool([str(_cuda_home() / "bin" / "nvcc"), "--version"]),
        "python": platform.python_version(),
    }


def _append(out: Path, row: dict[str, Any]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    with open(out / ROWS, "a", encoding="utf-8") as fh:
        fh.write(json.dumps(row, sort_keys=True) + "\n")
    print(json.dumps(row), flush=True)


def render(out: Path) -> str:
    rows = [json.loads(line) for line in (out / ROWS).read_text().splitlines() if line.strip()]
    lines = [
        "# Build once for the fleet: a second host vs the first host's cold build",
        "",
        "Generated by `benchmarks/fleet.py` (every build a fresh process: its own FlashInfer workspace and jitguard",
        "cache). *step* = jitguard's guarded build (`build_spec`, what the engine hook runs); *process* adds Python",
        "start and `import flashinfer` (the same with or without jitguard). CPU = user + system of the build and",
        "every process it reaped (ninja, nvcc/cicc, the sccache server; not redis-server, a service). Median of",
        "the repeats; *vs cold* is the step's share of the cold build's step. *compile commands*: how long each",
        "compile command ran (ninja's log; under sccache, how long it held its compile slot). The machine is",
        "shared with other work: *load avg* is the 1-minute load when the build started.",
        "",
    ]
    for module in sorted({r["module"] for r in rows}):
        mine = [r for r in rows if r["module"] == module]
        cold = [r for r in mine if r["scenario"] == "cold"]
        cold_wall = statistics.median(r["step_wall_s"] for r in cold) if cold else None
        cold_cpu = statistics.median(r["step_cpu_s"] for r in cold) if cold else None
        tus = mine[-1]["tus"]
        lines += [
            f"## {module} ({tus} TUs), {mine[-1]['machine']}",
            "",
            "| scenario | n | status | step wall (s) | vs cold | step CPU (s) | vs cold | process wall (s) | sccache hits/misses | compile commands (s) | load avg |",
            "|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        for scenario in SCENARIOS:
            these = [r for r in mine if r["scenario"] == scenario]
            if not these:
                continue
            wall = statistics.median(r["step_wall_s"] for r in these)
            cpu = statistics.median(r["step_cpu_s"] for r in these)
            pwall = statistics.median(r["process_wall_s"] for r in these)
            share = f"{wall / cold_wall:.1%}" if cold_wall else "-"
            cpu_share = f"{cpu / cold_cpu:.1%}" if cold_cpu else "-"
            cache = these[-1].get("compiler_cache")
            hits = f"{cache['hits']}/{cache['misses']}" if cache else "-"
            backend = f" ({these[-1]['sccache_backend']})" if these[-1].get("sccache_backend") else ""
            statuses = ",".join(sorted({r["status"] for r in these}))
            loads = ", ".join(f"{r['load_before']:.1f}" for r in these)
            # ninja logs one line per output (the object and its depfile): one compile per distinct pair.
            spans = sorted({t for r in these for t in r.get("compile_ms", [])})
            commands = f"{spans[0] / 1000:.1f}-{spans[-1] / 1000:.1f}" if spans else "none"
            lines.append(
                f"| {scenario}{backend} | {len(these)} | {statuses} | {wall:.2f} | {share} | {cpu:.2f} | {cpu_share} | "
                f"{pwall:.2f} | {hits} | {commands if scenario != 'publish' else '-'} | {loads} |"
            )
        publish = [r for r in mine if r["scenario"] == "publish"]
        if publish:
            shared = publish[-1]["shared"]
            if shared:
                lines += ["", f"Published {shared[-1]['bytes']} bytes in {shared[-1]['seconds']:.2f} s."]
        lines.append("")
    versions = rows[-1].get("versions")
    if versions:
        lines.append("Versions: " + ", ".join(f"{k} {v}" for k, v in versions.items()) + ".")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("command", choices=("all", "run", "render", "host"))
    parser.add_argument("--module", choices=("rope", "gdn"), default="rope")
    parser.add_argument("--scenario", choices=SCENARIOS, default=None)
    parser.add_argument("--sources", type=int, default=None, help="gdn only: keep K of the 32 instance TUs")
    parser.add_argument("--publish", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--sccache-backend", choices=("redis", "disk"), default="redis")
    parser.add_argument("--repeats", type=int, default=3, help="repeats of the cheap scenarios")
    parser.add_argument("--cold-repeats", type=int, default=2)
    parser.add_argument(
        "--work", default="/tmp/jitguard-fleet-bench", help="workspaces, caches and the store"
    )
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results"))
    parser.add_argument("--timeout", type=float, default=3600)
    args = parser.parse_args()

    if args.command == "host":
        print(json.dumps(host(args.module, args.sources, args.publish)))
        return
    if args.command == "render":
        (args.out / TABLE).write_text(render(args.out))
        print((args.out / TABLE).read_text())
        return
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    env = _base_env(work)
    versions = _versions()
    plan = [
        (s, n)
        for s in SCENARIOS
        for n in range(args.cold_repeats if s in ("cold", "sccache-first") else args.repeats)
    ]
    plan = [(s, n) for s, n in plan if not (s in ("publish", "sccache-first") and n > 0)]
    if args.command == "run":
        if args.scenario is None:
            raise SystemExit("run needs --scenario")
        plan = [
            (args.scenario, n)
            for n in range(args.repeats if args.scenario not in ("cold", "sccache-first", "publish") else 1)
        ]
    with contextlib.ExitStack() as stack:
        if args.sccache_backend == "redis" and any(s.startswith("sccache") for s, _ in plan):
            if args.command == "run":
                raise SystemExit(
                    "the redis backend needs `all` (redis-server lives as long as this process); use --sccache-backend disk"
                )
            env["SCCACHE_REDIS_ENDPOINT"] = stack.enter_context(_redis(work / "redis"))
        for scenario, repeat in plan:
            row = _scenario(args, scenario, env, repeat)
            row["versions"] = versions
            _append(args.out, row)
    (args.out / TABLE).write_text(render(args.out))
    print((args.out / TABLE).read_text())


if __name__ == "__main__":
    main()
