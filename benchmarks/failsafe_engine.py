"""The fail-safe promise in a real vLLM engine on the H200 (docs/failsafe.md, issue 17).

vLLM 0.24.0 (FlashInfer 0.6.12, nvcc-era GDN JIT) serving a tiny random-weight Qwen3-Next, with `-lcuda` made
unlinkable for real (the driver's dev symlink and the CUDA stub moved aside; the runtime libcuda.so.1 stays)
and jitguard installed WITHOUT one of its dependencies (pyelftools removed from the site dir), stock vLLM
beside it in the same run:

  stock-triton      JITGUARD_DISABLE=1, --gdn-prefill-backend triton   (the reference; warms Triton's cache)
  nodep-auto        jitguard, pyelftools missing, auto                 (expect: Triton/FLA, one warning, tokens)
  nodep-flashinfer  jitguard, pyelftools missing, flashinfer           (expect: a clear stop at init)

Run on the device after unpacking a vLLM 0.24.0 payload into /tmp/site:
    python3 benchmarks/failsafe_engine.py --site /tmp/site --out $OUT
Writes failsafe_engine.json and failsafe_engine.md under --out.
"""

from __future__ import annotations

import argparse
import contextlib
import glob
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

from vllm_engine_start import write_model  # beside this script

ENGINE = textwrap.dedent(
    """
    import sys, time
    started = time.time()
    from vllm import LLM, SamplingParams
    kwargs = dict(model=sys.argv[1], load_format="dummy", skip_tokenizer_init=True, enforce_eager=True,
                  max_model_len=1024, gpu_memory_utilization=0.25, dtype="bfloat16",
                  attention_backend="TRITON_ATTN")
    if sys.argv[2] != "auto":
        kwargs["gdn_prefill_backend"] = sys.argv[2]
    llm = LLM(**kwargs)
    print(f"READY {time.time() - started:.1f}", flush=True)
    out = llm.generate([{"prompt_token_ids": list(range(1, 200))}],
                       SamplingParams(max_tokens=8, temperature=0.0, detokenize=False))
    print(f"GENERATED {len(out[0].outputs[0].token_ids)} {time.time() - started:.1f}", flush=True)
    """
)
NEEDLES = ("jitguard", "FlashInfer GDN prefill is JIT", "Error", "error:")


def hide_libcuda() -> list[str]:
    """Move every linkable libcuda.so (not the runtime libcuda.so.1) aside, so `-lcuda` cannot link."""
    hidden = Path("/tmp/hidden-libcuda")
    hidden.mkdir(exist_ok=True)
    moved = []
    patterns = [
        "/lib/libcuda.so",
        "/usr/lib/libcuda.so",
        "/lib64/libcuda.so",
        "/usr/lib/x86_64-linux-gnu/libcuda.so",
        "/usr/lib64/libcuda.so",
        "/usr/local/nvidia/lib*/libcuda.so",
        "/usr/local/cuda*/lib64/stubs/libcuda.so",
        "/usr/local/cuda*/targets/*/lib/stubs/libcuda.so",
        "/usr/local/lib/python3*/dist-packages/nvidia/*/lib/libcuda.so",
    ]
    for pattern in patterns:
        for path in glob.glob(pattern):
            target = hidden / path.strip("/").replace("/", "_")
            try:
                shutil.move(path, target)
            except OSError as exc:  # a read-only driver mount: not on the linker's default path anyway
                moved.append(f"kept {path}: {exc.strerror}")
                continue
            moved.append(path)
    subprocess.run(["ldconfig"], check=False)
    return moved


def serve(
    name: str, model: Path, backend: str, env: dict[str, str], limit: float, out: Path
) -> dict[str, Any]:
    started = time.monotonic()
    log = out / f"{name}.log"
    with open(log, "w") as fh:
        proc = subprocess.Popen(
            [sys.executable, "-c", ENGINE, str(model), backend],
            env=env,
            stdout=fh,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        try:
            rc: int | None = proc.wait(limit)
        except subprocess.TimeoutExpired:
            rc = None
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)  # the engine's workers and any compile it left running
    text = log.read_text(errors="replace")
    ready = next((float(line.split()[1]) for line in text.splitlines() if line.startswith("READY ")), None)
    generated = next((line.split() for line in text.splitlines() if line.startswith("GENERATED ")), None)
    lines = [line.strip()[:400] for line in text.splitlines() if any(n in line for n in NEEDLES)]
    return {
        "scenario": name,
        "backend_flag": backend,
        "exit": "timeout" if rc is None else rc,
        "wall_s": round(time.monotonic() - started, 1),
        "ready_s": ready,
        "tokens": int(generated[1]) if generated else 0,
        "first_tokens_s": float(generated[2]) if generated else None,
        "traceback_lines": text.count("Traceback (most recent call last)"),
        "jitguard_lines": [line for line in lines if "jitguard" in line][:6],
        "other_lines": [line for line in lines if "jitguard" not in line][-4:],
    }


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--site", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--limit", type=float, default=240.0)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    moved = hide_libcuda()
    model = write_model(Path("/tmp/failsafe-qwen3next"))  # the model benchmarks/vllm_engine.py serves
    repo_src = str(Path(__file__).resolve().parents[1] / "src")
    base = {k: v for k, v in os.environ.items() if not k.startswith("JITGUARD_")}
    base.update(
        VLLM_USE_FLASHINFER_SAMPLER="0",
        FLASHINFER_WORKSPACE_BASE="/tmp/fi-workspace",
        JITGUARD_CACHE_DIR="/tmp/jitguard-cache",
        PYTHONUNBUFFERED="1",
    )
    stock = {**base, "PYTHONPATH": str(args.site), "JITGUARD_DISABLE": "1"}
    # jitguard with pyelftools missing: a copy of the site without it, this tree's jitguard first on the path.
    nodep = Path("/tmp/site-nodep")
    if not nodep.exists():
        nodep.mkdir()
        for entry in args.site.iterdir():
            if not entry.name.startswith(("elftools", "pyelftools")):
                (nodep / entry.name).symlink_to(entry)
    broken = {**base, "PYTHONPATH": f"{repo_src}{os.pathsep}{nodep}"}
    check = subprocess.run(
        [sys.executable, "-c", "import elftools"], env=broken, capture_output=True, text=True
    )
    rows = [
        serve("stock-triton", model, "triton", stock, args.limit, args.out),
        serve("nodep-auto", model, "auto", broken, args.limit, args.out),
        serve("nodep-flashinfer", model, "flashinfer", broken, args.limit, args.out),
    ]
    doctor = subprocess.run(
        [sys.executable, "-m", "jitguard", "doctor", "--json"],
        env=broken,
        capture_output=True,
        text=True,
        timeout=120,
    )
    try:
        payload = json.loads(doctor.stdout)
        doctor_codes = {k: [f["code"] for f in v["findings"]] for k, v in payload["backends"].items()}
        doctor_codes["installation"] = [f["code"] for f in payload["installation"]["findings"]]
    except (ValueError, KeyError) as exc:
        doctor_codes = {"error": [f"{exc}: {doctor.stderr[-300:]}"]}
    import torch

    result = {
        "machine": {
            "host": platform.node(),
            "gpu": torch.cuda.get_device_name(0),
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "torch": torch.__version__,
        },
        "hidden_libcuda": moved,
        "elftools_import_without_it": check.stderr.strip().splitlines()[-1:] or ["imports"],
        "doctor_codes": doctor_codes,
        "runs": rows,
    }
    (args.out / "failsafe_engine.json").write_text(json.dumps(result, indent=1))
    lines = [
        "| scenario | --gdn-prefill-backend | exit | ready (s) | tokens | first tokens (s) | tracebacks | jitguard said |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        said = "<br>".join(x.replace("|", "/")[:200] for x in r["jitguard_lines"][:2]) or "-"
        lines.append(
            f"| {r['scenario']} | {r['backend_flag']} | {r['exit']} | {r['ready_s']} | {r['tokens']} | "
            f"{r['first_tokens_s']} | {r['traceback_lines']} | {said} |"
        )
    (args.out / "failsafe_engine.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    print(json.dumps({k: v for k, v in result.items() if k != "runs"}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
