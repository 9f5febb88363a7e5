"""`jitguard gdn`: run the GDN prefill op on a built-in shape (`run`), or show the backend decision
(`explain`)."""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

from jitguard.cli.parsing import needs_action
from jitguard.config import Settings
from jitguard.errors import EXIT_FAILURE, EXIT_OK, UsageError

# The command's stages are imported where it runs them: `jitguard --help` imports every command module.

BACKENDS = ("auto", "flashinfer", "triton", "torch")
SHAPE_NAMES = ("small", "qwen3.5", "qwen3.5-long", "qwen3.5-tp8", "gqa")
# Above this many (token x head) steps the float64 token-by-token loop gets slow; the float64 run of the
# chunked algorithm (equal to it to ~1e-15, tests/unit/gdn) serves as the reference instead.
RECURRENCE_LIMIT = 64 * 1024


def configure(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "gdn",
        help="run the GDN prefill op on a built-in shape, or explain which backend it uses",
        description="The Gated DeltaNet prefill op (Qwen3.5, Qwen3-Next) on FlashInfer, FLA Triton, PyTorch.",
    )
    actions = parser.add_subparsers(dest="gdn_action", metavar="ACTION")
    run = actions.add_parser(
        "run",
        help="run the op once on a built-in shape; print the backend, why, the time and the error",
        description=(
            "Runs the op on random inputs of a built-in shape (default: qwen3.5 on a GPU, small on the CPU), "
            "prints the backend chosen and why the others were skipped, the first-call and steady time, and "
            "the error against a float64 reference. Exit 1 when the error is out of tolerance or a named "
            "backend cannot run."
        ),
    )
    run.add_argument("--backend", default="auto", type=str.lower, choices=BACKENDS, help="default: auto")
    run.add_argument(
        "--shape", default=None, choices=SHAPE_NAMES, help="default: qwen3.5 on cuda, small on cpu"
    )
    run.add_argument("--device", default=None, help="cuda or cpu (default: cuda when available)")
    run.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float16", "float32"))
    run.add_argument(
        "--no-state", action="store_true", help="start from a zero state instead of a random one"
    )
    run.add_argument("--repeat", type=int, default=3, help="timed calls after the first (default 3)")
    run.add_argument("--seed", type=int, default=0)
    run.add_argument("--json", action="store_true", help="print the versioned JSON envelope")
    run.set_defaults(execute=execute_run)
    explain = actions.add_parser(
        "explain",
        help="show the backend decision trace and each backend's status",
        description=(
            "Shows which backend a Qwen3.5 GDN prefill layer on CUDA would use here (JITGUARD_GDN_BACKEND "
            "included) and why each other is skipped. Exit 1 when no backend can run it."
        ),
    )
    explain.add_argument("--json", action="store_true", help="print the versioned JSON envelope")
    explain.set_defaults(execute=execute_explain)
    parser.set_defaults(execute=needs_action(parser, "jitguard gdn needs an action: run or explain"))


def execute_explain(args: argparse.Namespace) -> int:
    """Exit 1 when no backend can run the call (every one blocked, or JITGUARD_GDN_BACKEND names one that
    cannot run here), as doctor does; 2 for a malformed JITGUARD_GDN_BACKEND."""
    from jitguard.gdn.dispatch import backend_status, dispatcher, outlook

    Settings.from_env()  # malformed JITGUARD_* -> ConfigError -> exit 2, not a line in the trace
    d = dispatcher()
    auto = outlook()
    if args.json:
        from jitguard.cli.envelope import dumps

        payload = {
            "auto": auto.to_json(),
            "statuses": {name: backend_status(name).to_json() for name in d.order},
            "decisions": [decision.to_json() for decision in d.decisions()],
        }
        print(dumps("gdn.explain", payload))
    else:
        from jitguard.report.text import render_explain

        print(render_explain(d.decisions(), auto))
    return EXIT_OK if auto.candidates else EXIT_FAILURE


def execute_run(args: argparse.Namespace) -> int:
    import torch

    from jitguard.gdn.dispatch import dispatcher
    from jitguard.gdn.shapes import SHAPES, inputs_for

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if device != "cpu" and not (device == "cuda" or (device[:5] == "cuda:" and device[5:].isdigit())):
        raise UsageError(f"--device {device}: use cpu, cuda or cuda:N (e.g. cuda:0).")
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise UsageError(
            f"--device {device}: this torch ({torch.__version__}) sees no CUDA device. Use --device cpu."
        )
    if args.repeat < 0:
        raise UsageError("--repeat must be 0 or more")
    shape = SHAPES[args.shape or ("small" if device == "cpu" else "qwen3.5")]
    dtype = getattr(torch, args.dtype)
    x = inputs_for(shape, dtype=dtype, device=device, seed=args.seed, with_state=not args.no_state)

    def call() -> tuple[Any, Any]:
        return x.run(backend=args.backend)

    started = time.perf_counter()
    o, state = call()
    _sync(device)
    first = time.perf_counter() - started
    times = []
    for _ in range(args.repeat):
        started = time.perf_counter()
        call()
        _sync(device)
        times.append(time.perf_counter() - started)
    key_spec = (device.split(":")[0], str(dtype).replace("torch.", ""), shape.head_dim)
    decision = next(
        (
            dec
            for dec in dispatcher().decisions()
            if (dec.spec.device_type, dec.spec.dtype, dec.spec.head_dim) == key_spec
            and dec.requested == (args.backend if args.backend != "auto" else dec.requested)
        ),
        None,
    )
    ref_o, ref_state, ref_name = _reference(x, shape)
    err = {
        "output_max_rel": _max_rel(o, ref_o),
        "output_rms_rel": _rms_rel(o, ref_o),
        "state_max_rel": _max_rel(state, ref_state),
    }
    tolerance = 1e-5 if dtype == torch.float32 else 5e-3
    ok = err["output_rms_rel"] <= tolerance and err["state_max_rel"] <= max(tolerance, 1e-3)
    result = {
        "shape": {"name": shape.name, "description": shape.description, "lengths": list(shape.lengths)},
        "device": device,
        "dtype": args.dtype,
        "initial_state": not args.no_state,
        "backend": decision.backend if decision else None,
        "decision": decision.to_json() if decision else None,
        "first_call_s": first,
        "median_s": statistics.median(times) if times else None,
        "repeats": len(times),
        "reference": ref_name,
        "error": err,
        "tolerance_rms_rel": tolerance,
        "ok": ok,
    }
    if args.json:
        from jitguard.cli.envelope import dumps

        print(dumps("gdn.run", result))
    else:
        _print_run(result, decision)
    return EXIT_OK if ok else EXIT_FAILURE


def _sync(device: str) -> None:
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize()


def _reference(x: Any, shape: Any) -> tuple[Any, Any, str]:
    import torch

    if shape.total_tokens * shape.num_heads <= RECURRENCE_LIMIT:
        from jitguard.gdn.reference import recurrent_gated_delta_rule

        o, s = recurrent_gated_delta_rule(
            x.q, x.k, x.v, x.g, x.beta, cu_seqlens=x.cu_seqlens, initial_state=x.initial_state
        )
        return o, s, "float64 token-by-token recurrence"
    from jitguard.gdn.backends.torch import chunk_gated_delta_rule as chunked

    f64 = torch.float64
    o, s = chunked(
        x.q.to(f64),
        x.k.to(f64),
        x.v.to(f64),
        x.g.to(f64),
        x.beta.to(f64),
        cu_seqlens=x.cu_seqlens,
        initial_state=x.initial_state,
    )
    return o, s.double(), "float64 chunked (jitguard torch algorithm in float64)"


def _max_rel(a: Any, ref: Any) -> float:
    ref = ref.to(a.device).double()
    return float((a.double() - ref).abs().max() / ref.abs().max().clamp_min(1e-30))


def _rms_rel(a: Any, ref: Any) -> float:
    ref = ref.to(a.device).double()
    return float((a.double() - ref).pow(2).mean().sqrt() / ref.pow(2).mean().sqrt().clamp_min(1e-30))


def _print_run(result: dict[str, Any], decision: Any) -> None:
    shape = result["shape"]
    print(f"jitguard gdn run: {shape['name']} ({shape['description']})")
    state = "random initial state" if result["initial_state"] else "zero initial state"
    print(f"  inputs:     {result['device']}, {result['dtype']}, {state}")
    if decision is not None:
        print(f"  backend:    {decision.backend} (requested {decision.requested}, from {decision.source})")
        for entry in decision.trace:
            if entry.outcome in ("skipped", "failed"):
                print(f"  why not {entry.backend}: {entry.outcome}: {entry.reason}")
    print(f"  first call: {result['first_call_s'] * 1e3:.1f} ms (includes import, build or compile)")
    if result["median_s"] is not None:
        print(f"  time:       {result['median_s'] * 1e3:.3f} ms (median of {result['repeats']})")
    err = result["error"]
    print(f"  reference:  {result['reference']}")
    print(
        f"  error:      output {err['output_max_rel']:.2e} max-rel, {err['output_rms_rel']:.2e} rms-rel; "
        f"final state {err['state_max_rel']:.2e} max-rel"
    )
    verdict = "OK" if result["ok"] else "OUT OF TOLERANCE"
    print(f"  verdict:    {verdict} (output rms-rel <= {result['tolerance_rms_rel']:g})")
