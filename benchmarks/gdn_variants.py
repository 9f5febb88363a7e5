"""FlashInfer GDN prefill (nvcc era): a cold build of only the instances a model uses vs FlashInfer's full
module, and the numerical comparison of the two, on the H200 host.

The model is tests/data/models/qwen3_5/config.json (Qwen3.5-like: bfloat16, GVA, 16 q/k and 32 v heads,
D=128). Stages (each a separate process tree; rows are appended to ``$OUT/gdn_variants.jsonl`` and
``$OUT/gdn_variants.md`` is rewritten from them):

    full     cold build of FlashInfer's full module (``jitguard build flashinfer-gdn``: jitguard's budgeted -j)
             into ROOT/<version>/full, then the reference outputs of that module through FlashInfer's own
             Python API with jitguard off (JITGUARD_DISABLE=1), saved in ROOT and as SHA-256 digests
    subset   ``--plan`` timing; cold build of the model's module (``jitguard build flashinfer-gdn --model``)
             into ROOT/<version>/subset; then, with FLASHINFER_DISABLE_JIT=1 (nothing may compile):
             FlashInfer's API after ``jitguard.install()`` (the vLLM path), jitguard's op
             (``jitguard.gdn.chunk_gated_delta_rule``, no install), each compared with the reference
             (bitwise, max |diff|, FlashInfer's test tolerances); and the guard: the partial module called
             directly for an instance it lacks must raise, not crash
    lazy     a later call needs another instance (no initial state): the router builds it then (timed) and
             its output is compared with the full module's
    render   rewrite the markdown table from the rows

Wall: the build command's. CPU: user + system of the command and every process it waited for
(``os.wait4``). Peak RSS: the sum over the command's process tree, sampled every 0.25 s. TUs: the objects the
build compiled. The reference for ``subset``/``lazy`` is ROOT's saved tensors when the machine is still
warm; otherwise the digests of the ``full`` row in ``--reference`` (bitwise only). A fresh ``$OUT`` starts
from the rows in ``--reference`` (default benchmarks/results/gdn_variants.jsonl), so copying what each call
brings back there keeps one table across calls. ``GDN_VARIANTS_NOTE``: a note kept with the build row (what
else ran on the host, say) and printed under the table.

    python benchmarks/gdn_variants.py full|subset|lazy|render --flashinfer 0.6.6 [--root DIR] [--out DIR]

On the H200 host use ``benchmarks/gdn_variants.sh VERSION STAGE...`` (one device call each, < 10 minutes),
with the wheels the host lacks carried in ``.whl/`` (carry: [".whl"]), fetched here with:

    pip download --no-deps -d .whl flashinfer-python==0.6.6
    pip download --no-deps -d .whl flashinfer-python==0.6.12          # optional: the 66-file module
    pip download --no-deps -d .whl --python-version 3.12 --platform manylinux_2_28_x86_64 \
        --only-binary=:all: 'apache-tvm-ffi==0.1.15.post2' 'pyelftools>=0.30'
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
try:
    import jitguard  # noqa: F401
except ImportError:  # a checkout without `pip install -e .`: this process and its workers use src/
    sys.path.insert(0, str(REPO / "src"))
    os.environ["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(REPO / "src"), os.environ.get("PYTHONPATH")) if p
    )

MODEL = REPO / "tests" / "data" / "models" / "qwen3_5" / "config.json"
GIB = 1024**3
BUILD_TIMEOUT = "520"  # seconds: one device call may run 600, the reference run follows
# FlashInfer's own test tolerances (tests/gdn): bf16 output, fp32 state.
TOLERANCES = {"o": (1e-2, 1e-2), "state": (5e-3, 1e-3)}
# The inputs: Qwen3.5's GDN heads, 4 sequences of 2048 and a ragged batch, with and without initial state.
CASES = {"4x2048": [0, 2048, 4096, 6144, 8192], "ragged": [0, 100, 2148, 8192]}
HQ, HV, D = 16, 32, 128


# ---- building ----------------------------------------------------------------------------------------------
def measured(cmd: list[str], env: dict[str, str], log: Path) -> dict[str, Any]:
    """Run ``cmd``: wall, CPU of the whole tree (wait4), peak tree RSS and most cicc at once (sampled)."""
    from jit_build import Sampler

    start = time.monotonic()
    with open(log, "w") as out:
        proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        with Sampler([proc.pid], include_roots=True) as sampler:
            _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    return {
        "wall_s": round(time.monotonic() - start, 1),
        "cpu_s": round(usage.ru_utime + usage.ru_stime, 1),
        "peak_rss_bytes": sampler.peak_rss,
        "max_cicc": sampler.peak_cicc,
        "exit": proc.returncode,
    }


def build(
    kind: str, version: str, root: Path, env: dict[str, str], out: Path, resume: bool = False
) -> dict[str, Any]:
    """A cold build; ``resume``: go on from what an earlier call of this stage left (its row must be the
    previous full row: the table adds the calls up)."""
    workspace = root / version / kind
    if not resume:
        shutil.rmtree(workspace, ignore_errors=True)  # cold: nothing of an earlier run
    args = ["build", "flashinfer-gdn", "--workspace", str(workspace), "--timeout", BUILD_TIMEOUT, "--json"]
    if kind == "subset":
        args += ["--model", str(MODEL)]
    log = _log(root, version, kind)
    row = {
        "stage": kind,
        "flashinfer": version,
        "resumed": resume,
        **({"note": os.environ["GDN_VARIANTS_NOTE"]} if os.environ.get("GDN_VARIANTS_NOTE") else {}),
        **measured([sys.executable, "-m", "jitguard", *args], env, log),
    }
    text = log.read_text()
    payload = _last_json(text)
    row["status"] = payload.get("status", "no json") if payload else "no json"
    row["module"] = payload.get("module") if payload else None
    build_json = (payload or {}).get("build") or {}
    row["jobs"] = build_json.get("jobs")
    row["jitguard_peak_rss_bytes"] = build_json.get("peak_rss_bytes")
    row["findings"] = [f.get("code") for f in (payload or {}).get("findings", [])]
    modules = workspace / ".cache" / "flashinfer" / version / "90a" / "cached_ops"
    row["tus_compiled"] = len(list(modules.glob("*/*.cuda.o"))) if modules.is_dir() else 0
    row["plan"] = (payload or {}).get("plan")
    if row["exit"] != 0:
        row["tail"] = text.splitlines()[-8:]
    return row


def plan_timing(version: str, env: dict[str, str]) -> dict[str, Any]:
    cmd = [
        sys.executable,
        "-m",
        "jitguard",
        "build",
        "flashinfer-gdn",
        "--model",
        str(MODEL),
        "--plan",
        "--json",
    ]
    walls, inner = [], []
    for _ in range(5):
        start = time.monotonic()
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=60)
        walls.append(time.monotonic() - start)
        payload = _last_json(proc.stdout) or {}
        inner.append(payload.get("elapsed_s", -1))
    walls.sort()
    inner.sort()
    return {"stage": "plan", "flashinfer": version, "wall_s": round(walls[2], 3), "in_process_s": inner[2]}


# ---- running (workers: a fresh process each, FlashInfer fixes its workspace at import) --------------------
def inputs(case: str, *, with_state: bool) -> dict[str, Any]:
    """Deterministic inputs (CPU generator, then the GPU), in FlashInfer's convention (alpha = exp(g))."""
    import torch

    cu = CASES[case]
    t, n = cu[-1], len(cu) - 1
    gen = torch.Generator().manual_seed(1234 + len(cu))

    def randn(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=gen)

    def unit(x: torch.Tensor) -> torch.Tensor:
        return x / x.norm(dim=-1, keepdim=True)

    g_log = -torch.nn.functional.softplus(randn(t, HV)) * 0.1
    return {
        "q": unit(randn(t, HQ, D)).bfloat16().cuda(),
        "k": unit(randn(t, HQ, D)).bfloat16().cuda(),
        "v": randn(t, HV, D).bfloat16().cuda(),
        "g_log": g_log.cuda(),
        "beta": torch.sigmoid(randn(t, HV)).cuda(),
        "cu_seqlens": torch.tensor(cu, dtype=torch.int64).cuda(),
        "initial_state": (randn(n, HV, D, D) * 0.05).cuda() if with_state else None,
    }


def run_flashinfer(case: str, *, with_state: bool) -> tuple[Any, Any]:
    import torch
    from flashinfer.gdn_prefill import chunk_gated_delta_rule

    x = inputs(case, with_state=with_state)
    o, state = chunk_gated_delta_rule(
        x["q"],
        x["k"],
        x["v"],
        g=torch.exp(x["g_log"]),
        beta=x["beta"],
        initial_state=x["initial_state"],
        output_final_state=True,
        cu_seqlens=x["cu_seqlens"],
    )
    torch.cuda.synchronize()
    return o, state


def run_op(case: str) -> tuple[Any, Any]:
    import torch

    from jitguard.gdn import chunk_gated_delta_rule

    x = inputs(case, with_state=True)
    o, state = chunk_gated_delta_rule(
        x["q"],
        x["k"],
        x["v"],
        x["g_log"],
        x["beta"],
        cu_seqlens=x["cu_seqlens"],
        initial_state=x["initial_state"],
        output_final_state=True,
        backend="flashinfer",
    )
    torch.cuda.synchronize()
    return o, state


def digest(tensor: Any) -> str:
    import torch

    raw = tensor.detach().contiguous().cpu().view(torch.uint8).numpy().tobytes()
    return hashlib.sha256(raw).hexdigest()


def worker(mode: str, root: Path, version: str) -> dict[str, Any]:
    import logging

    import torch

    logging.basicConfig(level=logging.INFO, format="%(message)s")  # jitguard's lines, for the row

    saved = root / version / "tensors"
    saved.mkdir(parents=True, exist_ok=True)
    out: dict[str, Any] = {"mode": mode, "outputs": {}}
    runs: list[tuple[str, Any]] = []
    if mode == "reference":  # FlashInfer's full module, stock
        for case in CASES:
            runs.append((f"{case}/i1", lambda c=case: run_flashinfer(c, with_state=True)))
        runs.append(("4x2048/i0", lambda: run_flashinfer("4x2048", with_state=False)))
    elif mode == "routed":  # the vLLM path: FlashInfer's API, jitguard installed
        import jitguard

        jitguard.install()
        for case in CASES:
            runs.append((f"{case}/i1", lambda c=case: run_flashinfer(c, with_state=True)))
    elif mode == "op":
        for case in CASES:
            runs.append((f"{case}/i1", lambda c=case: run_op(c)))
    elif mode == "lazy":
        import jitguard

        jitguard.install()
        runs.append(("4x2048/i0", lambda: run_flashinfer("4x2048", with_state=False)))
    elif mode == "guard":
        return guard()
    for name, run in runs:
        start = time.monotonic()
        o, state = run()
        out["outputs"][name] = {
            "o": digest(o),
            "state": digest(state),
            "first_call_s": round(time.monotonic() - start, 2),
        }
        torch.save({"o": o.cpu(), "state": state.cpu()}, saved / f"{mode}-{name.replace('/', '-')}.pt")
    out["modules"] = _router_modules()
    return out


def guard() -> dict[str, Any]:
    """The partial module's own function, called for an instance it lacks (no initial state): it must raise."""
    import torch

    import jitguard
    from jitguard.gdn_variants.variant_plan import variant_of_call

    jitguard.install()
    import flashinfer.gdn_prefill  # noqa: F401  (routes the module getter)

    from jitguard.gdn_variants import module_router

    routed = module_router.router()
    assert routed is not None, "flashinfer.gdn_prefill was not routed"
    built = variant_of_call(
        "bfloat16",
        HQ,
        HV,
        has_alpha=True,
        has_beta=True,
        has_initial_state=True,
        checkpointing=False,
        family=routed.family,
    )
    assert built is not None
    kernel = routed.kernel_for(built)
    x = inputs("4x2048", with_state=False)
    t, n = x["q"].shape[0], 4
    args: list[Any] = [
        torch.empty(t, HV, D, dtype=torch.bfloat16, device="cuda"),
        torch.empty(n, HV, D, D, device="cuda"),
        x["q"],
        x["k"],
        x["v"],
        x["cu_seqlens"],
        None,
        torch.exp(x["g_log"]),
        x["beta"],
        0.0,
        torch.empty(
            torch.cuda.get_device_properties(0).multi_processor_count * 128, dtype=torch.uint8, device="cuda"
        ),
    ]
    if routed.family.has_checkpointing:
        args += [None, None, 0]
    try:
        kernel(*args)
        torch.cuda.synchronize()
        result = "returned (no error: the guard did not fire)"
    except Exception as exc:
        result = f"{type(exc).__name__}: {(str(exc).splitlines() or [''])[0][:300]}"
    return {"mode": "guard", "result": result, "modules": _router_modules()}


def _router_modules() -> dict[str, list[str]]:
    from jitguard.gdn_variants import module_router

    routed = module_router.router()
    if routed is None:
        return {}
    return {name: [v.suffix for v in vs] for name, vs in routed.modules().items()}


def run_worker(mode: str, version: str, root: Path, env: dict[str, str], out: Path) -> dict[str, Any]:
    log = _log(root, version, mode)
    cmd = [
        sys.executable,
        str(Path(__file__).resolve()),
        "_worker",
        mode,
        "--flashinfer",
        version,
        "--root",
        str(root),
    ]
    start = time.monotonic()
    with open(log, "w") as fh:
        proc = subprocess.run(cmd, env=env, stdout=fh, stderr=subprocess.STDOUT, timeout=560)
    text = log.read_text()
    result = _last_json(text) or {"mode": mode, "error": text.splitlines()[-8:]}
    result["jitguard_lines"] = [line[:300] for line in text.splitlines() if line.startswith("jitguard:")][:12]
    result["exit"] = proc.returncode
    result["wall_s"] = round(time.monotonic() - start, 1)
    return result


def compare(
    version: str, root: Path, mode: str, result: dict[str, Any], reference: dict[str, Any]
) -> list[dict[str, Any]]:
    """One row per output of ``mode`` against the full module's: bitwise, max |diff| and FlashInfer's
    tolerances from the reference tensors when this machine still has them, else bitwise from the digests."""
    import torch

    rows = []
    saved = root / version / "tensors"
    for name, got in result.get("outputs", {}).items():
        row: dict[str, Any] = {"stage": "numerics", "flashinfer": version, "path": mode, "case": name}
        a_file = saved / f"{mode}-{name.replace('/', '-')}.pt"
        b_file = saved / f"reference-{name.replace('/', '-')}.pt"
        if a_file.exists() and b_file.exists():
            a, b = torch.load(a_file), torch.load(b_file)
            for key in ("o", "state"):
                row[f"bitwise_{key}"] = bool(torch.equal(a[key], b[key]))
                x, y = a[key].float(), b[key].float()
                row[f"max_abs_{key}"] = float((x - y).abs().max())
                atol, rtol = TOLERANCES[key]
                row[f"within_tol_{key}"] = bool(torch.allclose(x, y, atol=atol, rtol=rtol))
        elif name in reference:
            for key in ("o", "state"):
                row[f"bitwise_{key}"] = got[key] == reference[name][key]
            row["note"] = "reference tensors not on this machine: bitwise from the digests only"
        else:
            row["note"] = "no reference: run the full stage first (same machine, or its rows in --reference)"
        rows.append(row)
    return rows


def _reference(version: str, out: Path, reference_file: Path) -> dict[str, Any]:
    """The full module's output digests: from this run's rows, else from ``--reference`` (an earlier call)."""
    return reference_outputs(version, load_rows(out / "gdn_variants.jsonl")) or reference_outputs(
        version, load_rows(reference_file)
    )


def reference_outputs(version: str, rows: list[dict[str, Any]]) -> dict[str, Any]:
    for row in reversed(rows):
        if row.get("stage") == "reference" and row.get("flashinfer") == version:
            return dict(row.get("outputs", {}))
    return {}


# ---- rows and the table -------------------------------------------------------------------------------------
def load_rows(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def append(out: Path, rows: list[dict[str, Any]]) -> None:
    from jit_build import machine

    info = machine()
    with open(out / "gdn_variants.jsonl", "a") as fh:
        for row in rows:
            fh.write(json.dumps({**row, "machine": info, "at": time.strftime("%Y-%m-%d %H:%M:%S")}) + "\n")
            print(json.dumps(row))


def combined(builds: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per build: a ``--resume`` row adds its wall and CPU to the call(s) before it (the same build
    over more than one device call), keeps the higher peak and the later status and TU count."""
    rows: list[dict[str, Any]] = []
    for r in builds:
        before = rows[-1] if rows else None
        if (
            r.get("resumed")
            and before
            and (before["stage"], before["flashinfer"]) == (r["stage"], r["flashinfer"])
        ):
            rows[-1] = {
                **r,
                "wall_s": round(before["wall_s"] + r["wall_s"], 1),
                "cpu_s": round(before["cpu_s"] + r["cpu_s"], 1),
                "peak_rss_bytes": max(before["peak_rss_bytes"], r["peak_rss_bytes"]),
                "max_cicc": max(before.get("max_cicc") or 0, r.get("max_cicc") or 0),
                "calls": before.get("calls", 1) + 1,
            }
        else:
            rows.append(r)
    return rows


def write_markdown(out: Path) -> None:
    rows = load_rows(out / "gdn_variants.jsonl")
    lines = [
        "# FlashInfer GDN prefill: only the model's instances vs the full module (nvcc era)",
        "",
        f"Generated by `benchmarks/gdn_variants.py` from `gdn_variants.jsonl`. Model: `{MODEL.relative_to(REPO)}`",
        "(Qwen3.5-like: bfloat16, GVA, 16 q/k / 32 v heads, D=128). Cold builds through `jitguard build",
        "flashinfer-gdn` (jitguard's budgeted -j). CPU = user + system of the whole build tree; peak RSS = sum over",
        "the tree, sampled every 0.25 s.",
        "",
        "| FlashInfer | module | TUs compiled | jobs | wall (s) | CPU (s) | peak RSS (GiB) | max cicc | status |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    builds = combined([r for r in rows if r.get("stage") in ("full", "subset")])
    for r in builds:
        calls = f" ({r['calls']} calls)" if r.get("calls") else ""
        lines.append(
            f"| {r['flashinfer']} | {r.get('module')} | {r.get('tus_compiled')} | {r.get('jobs')} | {r['wall_s']} | "
            f"{r['cpu_s']} | {r['peak_rss_bytes'] / GIB:.1f} | {r.get('max_cicc')} | {r.get('status')}{calls} |"
        )
    notes = [f"- {r['flashinfer']} {r.get('module')}: {r['note']}" for r in builds if r.get("note")]
    lines += ["", *notes] if notes else []
    lines += [
        "",
        "Subset / full, per FlashInfer version (goal: CPU and memory <= 1/8, wall <= one compile wave):",
        "",
    ]
    lines += [
        "| FlashInfer | CPU ratio | peak RSS ratio | wall ratio | subset wall (s) |",
        "|---|---|---|---|---|",
    ]
    for version in sorted({r["flashinfer"] for r in builds}):
        full = next(
            (r for r in reversed(builds) if r["flashinfer"] == version and r["stage"] == "full"), None
        )
        sub = next(
            (r for r in reversed(builds) if r["flashinfer"] == version and r["stage"] == "subset"), None
        )
        if full and sub and full["cpu_s"] and full["peak_rss_bytes"]:
            # A full build that never finished did only part of the work: its ratios are lower bounds.
            at_least = "" if full.get("status") == "built" else ">= "
            lines.append(
                f"| {version} | {at_least}1/{full['cpu_s'] / max(sub['cpu_s'], 0.1):.1f} | "
                f"{at_least}1/{full['peak_rss_bytes'] / max(sub['peak_rss_bytes'], 1):.1f} | "
                f"{at_least}1/{full['wall_s'] / max(sub['wall_s'], 0.1):.1f} | {sub['wall_s']} |"
            )
            if at_least:
                lines.append(
                    f"| {version} | (the full build stopped at its timeout after {full.get('tus_compiled')} "
                    "TUs: the full module costs more than its row) | | | |"
                )
    numerics = [r for r in rows if r.get("stage") == "numerics"]
    if numerics:
        lines += [
            "",
            "Outputs against FlashInfer's full module (stock, jitguard off), same inputs:",
            "",
            "| FlashInfer | path | case | o bitwise | state bitwise | max abs diff o | max abs diff state | within FlashInfer tol |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for r in numerics:
            tol = r.get("within_tol_o") and r.get("within_tol_state") if "within_tol_o" in r else "-"
            lines.append(
                f"| {r['flashinfer']} | {r['path']} | {r['case']} | {r.get('bitwise_o', '-')} | "
                f"{r.get('bitwise_state', '-')} | "
                f"{r.get('max_abs_o', '-')} | {r.get('max_abs_state', '-')} | {tol} |"
            )
    others = [r for r in rows if r.get("stage") in ("plan", "guard", "lazy", "served")]
    if others:
        lines += ["", "| FlashInfer | check | result |", "|---|---|---|"]
        for r in others:
            if r["stage"] == "plan":
                what = f"`--plan` median of 5: {r['wall_s']} s per process ({r['in_process_s']} s in-process)"
            elif r["stage"] == "guard":
                what = f"partial module called for an instance it lacks: {r.get('result')} (exit {r.get('exit')})"
            elif r["stage"] == "lazy":
                what = f"later call without initial state: built then in {r.get('first_call_s')} s; modules {r.get('modules')}"
            else:
                what = f"{r.get('path')}: served by {r.get('modules')} (exit {r.get('exit')}, full module built: {r.get('full_so')})"
            lines.append(f"| {r['flashinfer']} | {r['stage']} | {what} |")
    if rows:
        m = rows[-1].get("machine", {})
        lines += ["", f"Machine (last row): `{json.dumps(m, sort_keys=True)}`"]
    (out / "gdn_variants.md").write_text("\n".join(lines) + "\n")


def _log(root: Path, version: str, name: str) -> Path:
    """Logs stay in ROOT: at most 8 files come back from $OUT (rows keep the tail of a failure's log)."""
    path = root / "logs" / f"{version}-{name}.log"
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


def _last_json(text: str) -> dict[str, Any] | None:
    """The last JSON object printed (the envelope spans several lines; a worker prints one line)."""
    start = text.rfind("\n{")
    candidates = [text[start + 1 :]] if start >= 0 else []
    if text.startswith("{"):
        candidates.append(text)
    for candidate in candidates:
        try:
            data = json.loads(candidate)
        except ValueError:
            continue
        if isinstance(data, dict):
            return data
    return None


# ---- the stages ---------------------------------------------------------------------------------------------
def stage_full(version: str, root: Path, out: Path, env: dict[str, str], resume: bool = False) -> None:
    row = build("full", version, root, env, out, resume)
    append(out, [row])
    if row["exit"] != 0:
        print(f"the full build did not finish ({row['status']}): no reference outputs", file=sys.stderr)
        return
    ws = {**env, "FLASHINFER_WORKSPACE_BASE": str(root / version / "full"), "JITGUARD_DISABLE": "1"}
    reference = run_worker("reference", version, root, ws, out)
    append(out, [{"stage": "reference", "flashinfer": version, **reference}])


def stage_subset(version: str, root: Path, out: Path, env: dict[str, str], reference_file: Path) -> None:
    append(out, [plan_timing(version, env)])
    row = build("subset", version, root, env, out)
    append(out, [row])
    if row["exit"] != 0:
        print(f"the subset build did not finish ({row['status']}): nothing to compare", file=sys.stderr)
        return
    reference = _reference(version, out, reference_file)
    served = {
        **env,
        "FLASHINFER_WORKSPACE_BASE": str(root / version / "subset"),
        "FLASHINFER_DISABLE_JIT": "1",
    }
    full_so = (
        root
        / version
        / "subset"
        / ".cache/flashinfer"
        / version
        / "90a/cached_ops/gdn_prefill_sm90/gdn_prefill_sm90.so"
    )
    for mode in ("routed", "op"):
        result = run_worker(mode, version, root, served, out)
        append(
            out,
            [
                {
                    "stage": "served",
                    "flashinfer": version,
                    "path": mode,
                    "modules": result.get("modules"),
                    "exit": result["exit"],
                    "full_so": full_so.exists(),
                    "error": result.get("error"),
                    "jitguard_lines": result.get("jitguard_lines"),
                }
            ],
        )
        append(out, compare(version, root, mode, result, reference))
    result = run_worker("guard", version, root, served, out)
    append(out, [{"stage": "guard", "flashinfer": version, **result}])


def stage_lazy(version: str, root: Path, out: Path, env: dict[str, str], reference_file: Path) -> None:
    reference = _reference(version, out, reference_file)
    ws = {**env, "FLASHINFER_WORKSPACE_BASE": str(root / version / "subset")}
    result = run_worker("lazy", version, root, ws, out)
    first: dict[str, Any] = next(iter(result.get("outputs", {}).values()), {})
    append(
        out,
        [
            {
                "stage": "lazy",
                "flashinfer": version,
                "first_call_s": first.get("first_call_s"),
                "modules": result.get("modules"),
                "exit": result["exit"],
                "error": result.get("error"),
                "jitguard_lines": result.get("jitguard_lines"),
            }
        ],
    )
    append(out, compare(version, root, "lazy", result, reference))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("stage", choices=("full", "subset", "lazy", "render", "_worker"))
    parser.add_argument("mode", nargs="?", help="(workers only)")
    parser.add_argument("--flashinfer", default="0.6.6", help="the flashinfer-python version on the path")
    parser.add_argument(
        "--root", type=Path, default=Path("/tmp/jitguard-variants"), help="workspaces, tensors"
    )
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT") or HERE / "results"))
    parser.add_argument(
        "--reference",
        type=Path,
        default=HERE / "results" / "gdn_variants.jsonl",
        help="rows with the full module's output digests, when ROOT no longer has them",
    )
    parser.add_argument(
        "--resume",
        action="store_true",
        help="full: go on with the build an earlier call left at its timeout (same machine, still warm)",
    )
    args = parser.parse_args()
    sys.path.insert(0, str(HERE))  # jit_build's Sampler and machine(), beside this script
    if args.stage == "_worker":
        print(json.dumps(worker(args.mode, args.root, args.flashinfer)))
        return 0
    args.out.mkdir(parents=True, exist_ok=True)
    rows_file = args.out / "gdn_variants.jsonl"
    if not rows_file.exists() and args.reference.is_file():
        # A fresh $OUT (each device call gets one): continue from the rows earlier calls brought back.
        shutil.copyfile(args.reference, rows_file)
    if args.stage != "render":
        import importlib.metadata

        found = importlib.metadata.version("flashinfer-python")
        if found != args.flashinfer:
            sys.exit(f"flashinfer-python {found} is on the path, not {args.flashinfer}")
        env = {k: v for k, v in os.environ.items() if k != "MAX_JOBS"}
        env.update(
            {"FLASHINFER_CUDA_ARCH_LIST": "9.0a", "JITGUARD_CACHE_DIR": str(args.root / "jitguard-cache")}
        )
        if args.stage == "full":
            stage_full(args.flashinfer, args.root, args.out, env, args.resume)
        elif args.stage == "subset":
            stage_subset(args.flashinfer, args.root, args.out, env, args.reference)
        else:
            stage_lazy(args.flashinfer, args.root, args.out, env, args.reference)
    write_markdown(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
