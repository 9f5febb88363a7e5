"""A real vLLM engine on the H200 host, stock beside jitguard, with FlashInfer made to fail for real, for one
or more vLLM releases in one run (each unpacked from its payload into a site dir of its own).

Stages (each engine in its own session under a time limit, killed with every process it left by pid after,
``engine_session.py``; rows run in order, the first of each release warms Triton's cache for the others):

  sampler   (default) FlashInfer's top-k/top-p sampler doomed for real: libcuda made unlinkable (its dev
            symlink and the toolkit's stub hidden; the runtime libcuda.so.1 stays), vLLM's default sampler
            (FlashInfer's, a JIT module), GDN off the table (a dense Qwen3 by default, ``--sampler-model``):
            jitguard (PyTorch's sampler at init, serves), stock (compiles the sampling module, then its link
            fails), jitguard with VLLM_USE_FLASHINFER_SAMPLER=1 (stops at init)
  gdn       libcuda unlinkable, a tiny Qwen3-Next, the sampler off (VLLM_USE_FLASHINFER_SAMPLER=0): stock auto
            (FlashInfer's GDN build runs until the limit), jitguard auto (Triton/FLA), jitguard
            ``--gdn-prefill-backend flashinfer`` (stops at init). nvcc-era FlashInfer only (0.6.3 - 0.6.13,
            vLLM <= 0.24): 0.6.14 compiles GDN in-process with CuTeDSL, nothing links, so it is skipped there
  firstuse  libcuda back, a sampling build that fails at its first nvcc call (FLASHINFER_EXTRA_CUDAFLAGS=<a
            flag nvcc rejects>): stock dies, jitguard fails over at first use, its next start decides at init
  all       gdn, sampler, firstuse

Each row: exit (status, or the limit), seconds to the first line that says what happens with FlashInfer (a
jitguard verdict, or stock's error), seconds until the engine was ready, time to first token, where it was
when it ended (the stage of an engine start), the lines that matter from the log, the most compilers alive at
once and the objects built, and the fingerprint jitguard logged. The whole run keeps within ``--budget``
seconds (default 510): a row whose limit no longer fits gets what is left, one with under a minute left is
not started (a note says so). Results: ``$OUT/vllm_engine.<stage>.json``, ``$OUT/vllm_engine.md`` and each
engine's output in ``$OUT/logs/``; each
stage's rows are also kept in /tmp/jitguard-vllm-engine-results, so two calls (the host still warm) give one
table with both.

On the H200 device (root; 16 CPUs), the doomed sampler with vLLM 0.24.0 and 0.26.0 in one run (~6 minutes):

1. Here, in the checkout the device calls send, build the two payloads (with the vLLM payload builder
   make_payload.sh VERSION DIR [EXTRA], kept outside this repository):
       echo /.gpu/ >> .git/info/exclude
       make_payload.sh 0.24.0 .gpu/v024      # 4 parts, 185 MB (~5 min)
       make_payload.sh 0.26.0 .gpu/v026 'nvidia-cutlass-dsl[cu13]==4.6.0'
                                      # 5 parts, 279 MB, 1.1 GB unpacked (17.5 min on a 2-core machine)
2. Carry them back to back, 9 calls (64 MiB a call; the machine keeps /tmp only while warm): one part per call
   in a carried folder, e.g. .gpu/carry/; the first call also carries zstandard-*.whl and unpack.py:
       call 1:   mkdir -p /tmp/p024 /tmp/p026 && cp .gpu/carry/* /tmp/p024/      (v024's part.0, wheel, unpack.py)
       next:     cp .gpu/carry/* /tmp/p024/     (each further part of v024), then /tmp/p026/ for v026's parts
       last:     cp .gpu/carry/* /tmp/p026/ && python3 -m pip install -q --no-index --no-deps --target /tmp/zst
                 /tmp/p024/zstandard-*.whl && PYTHONPATH=/tmp/zst python3 /tmp/p024/unpack.py /tmp/v024
                 /tmp/p024/part.* && PYTHONPATH=/tmp/zst python3 /tmp/p024/unpack.py /tmp/v026 /tmp/p026/part.*
3. The run, one call (timeout_s=600), nothing carried:
       bash benchmarks/vllm_engine.sh sampler /tmp/v024/site /tmp/v026/site

The 0.24 GDN scenarios, as before (0.24 payload unpacked into /tmp/site): ``bash benchmarks/vllm_engine.sh
gdn``. Directly: ``python3 benchmarks/vllm_engine.py [--stage ...] [--site DIR ...] [--out DIR]``.

One release per call instead (when the second payload does not fit beside the first): run each call's stages,
keep its ``$OUT/vllm_engine.<stage>.json`` under a name of its own, then make one table of them here:
``python3 benchmarks/vllm_engine.py --combine A.json B.json ... --out benchmarks/results`` (how the committed
table was made: ``vllm_engine.{sampler.0.24.0,sampler.0.26.0,firstuse.0.24.0}.json``).
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
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import engine_session  # beside this script
from engine_session import MIN_ROW_S, Budget

BROKEN_NVCC_FLAG = "--jitguard-bench-no-such-nvcc-flag"
HIDDEN = ".jitguard-hidden"
LEDGER = Path("/tmp/jitguard-bench-hidden-libcuda.json")  # what is hidden now, for a run killed hard
START = Path(__file__).with_name("vllm_engine_start.py")  # one engine start, and the model it serves
SRC = Path(__file__).resolve().parents[1] / "src"  # this tree's jitguard, first on every engine's path
KEPT = Path("/tmp/jitguard-vllm-engine-results")  # each stage's rows, across calls while the host stays warm
STAGES = ("gdn", "sampler", "firstuse")
SAMPLER_MODELS = {
    "qwen3": "a 2-layer dense Qwen3 (nothing for Triton to compile cold but attention)",
    "qwen3-next": "the same Qwen3-Next (GDN on Triton)",
}
# Lines worth keeping from an engine's log (jitguard's, FlashInfer's JIT, and the errors that end a start).
KEEP = re.compile(
    r"jitguard: |JIT-compiled|cannot find -l|Build of |ninja: build stopped|Error|error:|Using .* (GDN|sampl)"
    r"|FlashInfer top-p|nvcc fatal",
)
STOPPED = re.compile(r"jitguard: FlashInfer .* was requested")
VERDICT = re.compile(
    r"jitguard: (vLLM chose|FlashInfer .* was requested|FlashInfer .* failed on first use)|cannot find -lcuda"
    r"|nvcc fatal|Build of \S+ failed|ninja: build stopped"
)


@dataclass(frozen=True)
class Site:
    """One unpacked payload: a site dir holding one vLLM release (and its FlashInfer)."""

    path: Path
    vllm: str
    flashinfer: str | None

    @classmethod
    def of(cls, path: Path) -> Site:
        return cls(path, _dist_version(path, "vllm") or "?", _dist_version(path, "flashinfer_python"))

    @property
    def nvcc_era_gdn(self) -> bool:
        """FlashInfer 0.6.3 - 0.6.13 builds GDN prefill with nvcc (docs/cutedsl.md: 0.6.14 moved it to CuTeDSL)."""
        parts = tuple(int(p) for p in re.findall(r"\d+", self.flashinfer or "")[:3])
        return (0, 6, 3) <= parts < (0, 6, 14)


def _dist_version(site: Path, name: str) -> str | None:
    """The version in ``site/<name>-<version>.dist-info`` (read from the directory name: no import)."""
    for entry in sorted(site.glob(f"{name}-*.dist-info")):
        return entry.name[len(name) + 1 : -len(".dist-info")]
    return None


@dataclass
class Row:
    stage: str
    name: str
    jitguard: bool
    expect: str
    limit_s: float
    vllm: str = ""
    exit: str = ""
    verdict_s: float | None = None
    ready_s: float | None = None
    ttft_s: float | None = None
    generated: int | None = None
    ended_in: str = ""  # the stage of an engine start it was in when it exited or was killed
    peak_compilers: int = 0
    objects_built: int = 0
    fingerprints: list[str] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)
    ok: bool = False
    log: str = ""  # the engine's whole output, under --out (logs/)


# ---- one engine start -------------------------------------------------------------------------------------
def run_engine(
    row: Row,
    site: Site,
    model: Path,
    env: dict[str, str],
    gdn: str,
    sampling: str,
    budget: Budget,
    logs: Path,
) -> Row | None:
    """Start one engine under ``row.limit_s`` (or what the budget has left), its whole output kept in
    ``logs``; None when there is no time."""
    row.vllm = site.vllm
    row.limit_s = round(min(row.limit_s, budget.left()), 1)
    if row.limit_s < MIN_ROW_S:
        return None
    argv = [sys.executable, str(START), "serve", str(model), gdn, sampling]
    done = engine_session.run(argv, env, limit_s=row.limit_s)
    for seconds, line in done.lines:
        if row.verdict_s is None and VERDICT.search(line):
            row.verdict_s = seconds
        row.fingerprints += [
            fp for fp in re.findall(r"\(fingerprint ([0-9a-f]{16})\)", line) if fp not in row.fingerprints
        ]
        if KEEP.search(line) and len(row.lines) < 12:
            row.lines.append(f"[{seconds:6.1f} s] {line[:400]}")
    slug = re.sub(r"[^A-Za-z0-9.]+", "-", f"{row.stage} {row.vllm} {row.name}").strip("-")
    log = logs / f"{slug}.log"
    log.write_text(done.tail(min(len(done.lines), 4000)) + "\n")  # the last 4000 lines
    row.log = f"logs/{log.name}"
    row.exit = "limit" if done.timed_out else str(done.status)
    row.ready_s, row.ttft_s, row.generated = done.ready_s, done.ttft_s, done.generated
    row.ended_in = f"{done.stage} (from {done.stage_s:g} s)"
    row.peak_compilers = done.peak_compilers
    row.objects_built = _objects(Path(env["FLASHINFER_WORKSPACE_BASE"]))
    row.ok = _meets(row)
    return row


def _meets(row: Row) -> bool:
    """``serves``: 8 tokens; ``stops``: an exit at init that jitguard explained (its "was requested" line);
    ``fails or hangs``: anything but serving (stock's outcome)."""
    served = row.exit == "0" and row.generated == 8
    explained = any(STOPPED.search(line) for line in row.lines)
    stopped = row.exit not in ("0", "limit") and row.ready_s is None and explained
    return {"serves": served, "stops": stopped, "fails or hangs": not served}[row.expect]


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
    """Whether FlashInfer's link line fails on ``-lcuda`` here (jitguard's real trial link). Read from the
    link facts, not a backend's findings: a CuTeDSL-era GDN op links nothing, its sampler still does."""
    link = doctor_json(env)["facts"]["link"]
    return link.get("error") is None and link.get("cuda_links") is False


@contextmanager
def libcuda_hidden(env: dict[str, str], notes: list[str]) -> Iterator[list[str]]:
    """Rename the linkable ``libcuda.so`` files (restored on exit, whatever happens); yields what was hidden.
    A file that cannot be renamed (the H200's driver mount is read-only) stays, with a note."""
    moved: list[tuple[Path, Path]] = []
    try:
        for _ in range(6):  # the dev link, the toolkit's stub, ...: one at a time, as the linker finds them
            path = libcuda_the_linker_takes(env)
            if path is None or path.name != "libcuda.so" or _runtime_behind(path):
                break  # never what libcuda.so.1 (the runtime the engine needs) resolves to
            target = path.with_name(path.name + HIDDEN)
            try:
                os.rename(path, target)
            except OSError as exc:
                notes.append(f"could not hide {path}: {exc.strerror}; the linker still takes it")
                break
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
@dataclass
class Run:
    """What every stage of one invocation shares."""

    work: Path
    sites: list[Site]
    budget: Budget
    sampler_model: str
    logs: Path  # each engine's whole output, to read what the table only sums up
    models: dict[tuple[str, str], Path] = field(default_factory=dict)

    def model(self, site: Site, kind: str) -> Path:
        """``kind``'s config.json, written by the transformers that ``site``'s vLLM reads it with."""
        if (site.vllm, kind) not in self.models:
            directory = self.work / f"model-{kind}-{site.vllm}"
            env = self.env(site, "model", jitguard=False)
            subprocess.run([sys.executable, str(START), "model", str(directory), kind], env=env, check=True)
            self.models[site.vllm, kind] = directory
        return self.models[site.vllm, kind]

    def sampler_how(self) -> dict[str, str]:
        """How the sampler stages start an engine: top-k/top-p sampling; GDN on Triton (Qwen3-Next only)."""
        gdn = "triton" if self.sampler_model == "qwen3-next" else "auto"
        return {"model": self.sampler_model, "gdn": gdn, "sampling": "top"}

    def env(self, site: Site, name: str, *, jitguard: bool, **extra: str) -> dict[str, str]:
        """A fresh jitguard cache and FlashInfer workspace per row; this tree's jitguard, then the site."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("JITGUARD_")}
        tag = f"{site.vllm}-{name}"
        env.update(
            PYTHONPATH=f"{SRC}{os.pathsep}{site.path}",
            JITGUARD_CACHE_DIR=str(self.work / f"{tag}-cache"),
            FLASHINFER_WORKSPACE_BASE=str(self.work / f"{tag}-workspace"),
            PYTHONUNBUFFERED="1",
            HF_HUB_OFFLINE="1",
            **extra,
        )
        if not jitguard:
            env["JITGUARD_DISABLE"] = "1"
        return env

    def start(
        self, rows: list[Row], notes: list[str], row: Row, site: Site, env: dict[str, str], **how: str
    ) -> None:
        model = self.model(site, how.get("model", "qwen3-next"))
        gdn, sampling = how.get("gdn", "auto"), how.get("sampling", "greedy")
        done = run_engine(row, site, model, env, gdn, sampling, self.budget, self.logs)
        if done is None:
            notes.append(
                f"{row.stage} | vLLM {site.vllm} | {row.name}: not started, under {MIN_ROW_S:g} s of the "
                "run's budget left"
            )
            return
        rows.append(done)
        print(_line(done), flush=True)


def gdn_stage(run: Run, notes: list[str]) -> list[Row]:
    rows: list[Row] = []
    plan = [
        ("stock, auto", False, "auto", "fails or hangs", 75),
        ("jitguard, auto", True, "auto", "serves", 300),
        ("jitguard, --gdn-prefill-backend flashinfer", True, "flashinfer", "stops", 150),
    ]
    sites = [s for s in run.sites if s.nvcc_era_gdn]
    for site in run.sites:
        if site not in sites:
            notes.append(
                f"gdn: vLLM {site.vllm} skipped: flashinfer-python {site.flashinfer} compiles GDN prefill "
                "in-process (CuTeDSL), there is no nvcc build or link to doom"
            )
    if not sites:
        return rows
    with libcuda_hidden(run.env(sites[0], "gdn-probe", jitguard=True), notes) as hidden:
        notes.append(f"gdn: hidden for the link: {', '.join(hidden) or 'nothing found'}")
        for site in sites:
            if not doomed_link(run.env(site, "gdn-probe", jitguard=True)):
                notes.append(f"gdn: vLLM {site.vllm} skipped, -lcuda still links here")
                continue
            for i, (name, jitguard, gdn, expect, limit) in enumerate(plan):
                env = run.env(site, f"gdn-{i}", jitguard=jitguard, VLLM_USE_FLASHINFER_SAMPLER="0")
                row = Row("gdn: libcuda unlinkable", name, jitguard, expect, limit)
                run.start(rows, notes, row, site, env, gdn=gdn)
    return rows


def sampler_stage(run: Run, notes: list[str]) -> list[Row]:
    """The doomed sampler, every release: jitguard first (it warms Triton's cache for the rows after it)."""
    rows: list[Row] = []
    stage = "sampler: libcuda unlinkable"
    plan = [
        ("jitguard, default sampler", True, {}, "serves", 180),
        ("stock, default sampler", False, {}, "fails or hangs", 150),
        ("jitguard, VLLM_USE_FLASHINFER_SAMPLER=1", True, {"VLLM_USE_FLASHINFER_SAMPLER": "1"}, "stops", 120),
    ]
    how = run.sampler_how()
    with libcuda_hidden(run.env(run.sites[0], "sampler-probe", jitguard=True), notes) as hidden:
        notes.append(f"sampler: hidden for the link: {', '.join(hidden) or 'nothing found'}")
        for site in run.sites:
            if not doomed_link(run.env(site, "sampler-probe", jitguard=True)):
                notes.append(f"sampler: vLLM {site.vllm} skipped, -lcuda still links here")
                continue
            for i, (name, jitguard, extra, expect, limit) in enumerate(plan):
                env = run.env(site, f"s{i}", jitguard=jitguard, **extra)
                run.start(rows, notes, Row(stage, name, jitguard, expect, limit), site, env, **how)
    return rows


def firstuse_stage(run: Run, notes: list[str]) -> list[Row]:
    rows: list[Row] = []
    stage = "sampler: its build fails at the first nvcc"
    broken = {"FLASHINFER_EXTRA_CUDAFLAGS": BROKEN_NVCC_FLAG}
    how = run.sampler_how()
    for site in run.sites:
        stock = run.env(site, "f0", jitguard=False, **broken)
        run.start(rows, notes, Row(stage, "stock", False, "fails or hangs", 180), site, stock, **how)
        again = run.env(site, "f1", jitguard=True, **broken)
        run.start(rows, notes, Row(stage, "jitguard, first start", True, "serves", 180), site, again, **how)
        row = Row(stage, "jitguard, next start (recorded)", True, "serves", 180)
        run.start(rows, notes, row, site, again, **how)
    return rows


STAGE_RUNNERS = {"gdn": gdn_stage, "sampler": sampler_stage, "firstuse": firstuse_stage}


# ---- results ----------------------------------------------------------------------------------------------
def _line(row: Row) -> str:
    return (
        f"{row.stage} | vLLM {row.vllm} | {row.name}: exit {row.exit}, verdict {row.verdict_s} s, ready "
        f"{row.ready_s} s, ttft {row.ttft_s} s, ended in {row.ended_in}, "
        f"{'as expected' if row.ok else 'NOT as expected'} ({row.expect})"
    )


def machine(sites: list[Site]) -> dict[str, Any]:
    info: dict[str, Any] = {
        "host": platform.node(),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "releases": [{"vllm": s.vllm, "flashinfer-python": s.flashinfer, "site": str(s.path)} for s in sites],
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

    for name in ("torch", "triton"):
        try:
            info[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            info[name] = None
    return info


def render(rows: list[Row], info: dict[str, Any], notes: list[str]) -> str:
    releases = ", ".join(
        f"vLLM {r['vllm']} (flashinfer-python {r['flashinfer-python']})" for r in info.get("releases", [])
    )
    out = [
        "# vLLM engine starts: stock beside jitguard, FlashInfer doomed for real",
        "",
        f"Produced by `benchmarks/vllm_engine.py` on {info.get('gpu')} ({info.get('cpus')} CPUs): {releases}; "
        f"torch {info.get('torch')}, triton {info.get('triton')}. Tiny random-weight models (`load_format="
        f'"dummy"`): a 4-layer Qwen3-Next for GDN, {SAMPLER_MODELS[info.get("sampler_model", "qwen3")]} for the '
        "sampler; TP1, eager, Triton attention.",
        "Times in seconds from the engine's start: the first line saying what happens with FlashInfer (a "
        "jitguard verdict or stock's error), engine ready, time to first token (1-token generate).",
        "",
        "| scenario | vLLM | engine | exit | verdict | ready | TTFT | ended in | compilers (objects built) "
        "| as expected |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        exit_ = f"killed at {r.limit_s:g} s" if r.exit == "limit" else r.exit
        out.append(
            f"| {r.stage} | {r.vllm} | {r.name} | {exit_} | {_n(r.verdict_s)} | {_n(r.ready_s)} | "
            f"{_n(r.ttft_s)} | {r.ended_in} | {r.peak_compilers} ({r.objects_built}) | "
            f"{'yes' if r.ok else 'NO'} ({r.expect}) |"
        )
    out += ["", "## What the logs said", ""]
    for r in rows:
        out += [
            f"**{r.stage}, vLLM {r.vllm}, {r.name}** (fingerprints logged: {', '.join(r.fingerprints) or 'none'})",
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


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--stage", choices=("all", *STAGES), default="sampler")
    parser.add_argument(
        "--site",
        action="append",
        type=Path,
        default=[],
        help="an unpacked payload's site dir, one per vLLM release (repeatable; default $SITE or /tmp/site)",
    )
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "/tmp/out")))
    parser.add_argument(
        "--budget", type=float, default=510.0, help="seconds for the whole run (default 510: under 9 min)"
    )
    parser.add_argument(
        "--sampler-model",
        choices=tuple(SAMPLER_MODELS),
        default="qwen3",
        help="the model of the sampler stages: a dense Qwen3 (default: no FLA kernels to compile cold) or the "
        "GDN stage's Qwen3-Next",
    )
    parser.add_argument(
        "--combine",
        nargs="+",
        type=Path,
        metavar="JSON",
        help="run nothing: one table in --out from stage results of several calls (vllm_engine.<stage>.json, "
        "e.g. one release per call when two payloads do not fit on the host at once)",
    )
    args = parser.parse_args(argv)
    args.site = args.site or [Path(os.environ.get("SITE", "/tmp/site"))]
    return args


def combine(paths: list[Path], out: Path, after: Sequence[str] = ()) -> int:
    """Render one table from the stage results of one or more calls (their rows in the order given, the
    releases of them all in the header), ``after``: notes to end with."""
    rows: list[Row] = []
    notes: list[str] = []
    info: dict[str, Any] = {}
    releases: dict[str, dict[str, str]] = {}
    for path in paths:
        try:
            record = json.loads(path.read_text())
            found = [Row(**r) for r in record["rows"]]
            machine, said = dict(record["machine"]), [str(n) for n in record["notes"]]
            releases.update({r["vllm"]: r for r in machine.get("releases", [])})
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            print(
                f"vllm_engine.py: {path} is not a stage's results ({exc!r}); give the "
                "vllm_engine.<stage>.json files a run wrote to its --out",
                file=sys.stderr,
            )
            return 2
        info = info or machine
        rows += found
        notes += [f"{path.name}: {n}" for n in said]
    info["releases"] = list(releases.values())
    out.mkdir(parents=True, exist_ok=True)
    (out / "vllm_engine.md").write_text(render(rows, info, [*notes, *after]) + "\n")
    print(f"wrote {out}/vllm_engine.md ({sum(r.ok for r in rows)}/{len(rows)} as expected)")
    return 0


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.combine:
        return combine(args.combine, args.out)
    sites = [Site.of(p) for p in args.site]
    missing = [str(s.path) for s in sites if s.vllm == "?"]
    if missing:
        print(
            f"vllm_engine.py: no vLLM in {', '.join(missing)} (an unpacked payload's site dir)",
            file=sys.stderr,
        )
        return 2
    restore_leftovers()
    args.out.mkdir(parents=True, exist_ok=True)
    logs = args.out / "logs"
    logs.mkdir(exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="jitguard-vllm-engine-"))
    run = Run(work, sites, Budget(args.budget), args.sampler_model, logs)
    info = machine(sites)
    info["sampler_model"] = args.sampler_model
    stages = STAGES if args.stage == "all" else (args.stage,)
    ok = True
    for stage in stages:  # one file per stage, so two calls (one stage each) make one table
        notes: list[str] = []
        started = time.monotonic()
        rows = STAGE_RUNNERS[stage](run, notes)
        notes.append(f"stage {stage}: {time.monotonic() - started:.0f} s")
        ok = ok and all(r.ok for r in rows)
        record = {"machine": info, "notes": notes, "rows": [asdict(r) for r in rows]}
        KEPT.mkdir(parents=True, exist_ok=True)
        (KEPT / f"vllm_engine.{stage}.json").write_text(json.dumps(record, indent=2) + "\n")
    # This call's stages and an earlier call's (perhaps of another release), kept while the host is warm.
    kept = [path for stage in STAGES if (path := KEPT / f"vllm_engine.{stage}.json").exists()]
    for path in kept:
        shutil.copy(path, args.out / path.name)
    whole = f"the whole run: {time.monotonic() - run.budget.started:.0f} s (budget {args.budget:g} s)"
    if combine(kept, args.out, after=[whole]) != 0:
        return 2
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
