"""`jitguard starts [--last N] [--check] [--json]`: the last engine starts on this host side by side, from
their ledgers (``jitguard.ledger``): per JIT layer what compiled, what loaded from cache, what came from the
store and the seconds, jitguard's own seconds by phase, and the warm snapshot that covered each start.

``--check`` is must-hit: exit 1 when the last start compiled anything in a layer its warm snapshot covers, or
when no snapshot covered it at all: the step a Docker image build or a deployment's CI runs after baking a
snapshot and starting the engine once.
"""

from __future__ import annotations

import argparse
from typing import Any

from jitguard.errors import EXIT_FAILURE, EXIT_OK, UsageError

DEFAULT_SHOWN = 5


def configure(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "starts",
        help="show the last engine starts on this host: what each JIT layer compiled, loaded or restored",
        description=(
            "Every engine process with jitguard's vLLM or SGLang plugin records a start ledger: per JIT layer "
            "(FlashInfer nvcc modules, CuTeDSL kernels, Triton kernels and autotune runs, Inductor FX graphs, "
            "the engine's torch.compile) how many compiled, loaded from the tool's cache or came from the "
            "store, the seconds, and jitguard's own seconds by phase. The ledgers live in "
            "$JITGUARD_CACHE_DIR/starts/ (the last JITGUARD_STARTS_KEEP starts). --check exits 1 when the last "
            "start compiled anything its warm snapshot covers (must-hit)."
        ),
    )
    parser.add_argument(
        "--last",
        type=_count,
        default=DEFAULT_SHOWN,
        metavar="N",
        help=f"how many starts, newest first (default {DEFAULT_SHOWN})",
    )
    parser.add_argument(
        "--check",
        action="store_true",
        help="exit 1 unless the last start was covered by a warm snapshot and compiled nothing it covers",
    )
    parser.add_argument("--json", action="store_true", help="print the versioned JSON envelope")
    parser.set_defaults(execute=execute)


def _count(text: str) -> int:
    if not text.strip().isdigit() or not 1 <= int(text) <= 1000:
        raise UsageError(f"--last {text!r}: give a whole number of starts from 1 to 1000, such as 5")
    return int(text)


def execute(args: argparse.Namespace) -> int:
    from jitguard.config import Settings
    from jitguard.ledger import history

    cache_dir = Settings.from_env().cache_dir  # a malformed JITGUARD_* setting is exit 2, as everywhere
    starts = [s.to_json() for s in history.read_starts(cache_dir, limit=args.last)]
    check = _check(starts, history.starts_dir(cache_dir)) if args.check else None
    code = EXIT_FAILURE if check is not None and not check["passed"] else EXIT_OK
    if args.json:
        from jitguard.cli.envelope import dumps

        payload = {"cache_dir": str(cache_dir), "starts": starts, "check": check, "exit_code": code}
        print(dumps("starts", payload))
        return code
    if starts:
        print(render(starts))
    else:
        print(f"no engine start recorded in {history.starts_dir(cache_dir)} yet")
    if check is not None:
        print(("must-hit: passed: " if check["passed"] else "must-hit: FAILED: ") + check["reason"])
        for miss in check["misses"]:
            print(f"  {miss['layer']}: {miss['what']}: {miss['cause']}")
    return code


def _check(starts: list[dict[str, Any]], where: Any) -> dict[str, Any]:
    """Must-hit on the newest start: passed, why, and what compiled that the snapshot covers."""
    if not starts:
        return _verdict(
            False,
            None,
            f"no engine start recorded in {where}: start the engine once with jitguard installed "
            "(after `jitguard warm restore`), then run this again",
        )
    last = starts[0]
    warm = last["warm"]
    if not warm["covered"]:
        return _verdict(
            False,
            last,
            f"the last start ({last['start_id']}) was not covered by a warm snapshot (warm start: "
            f"{warm['outcome']}): restore one first (`jitguard warm restore --store URL`, or JITGUARD_SHARE "
            "in the engine's environment)",
        )
    compiled = last["covered_compiles"]
    if compiled:
        said = ", ".join(f"{layer} {n}" for layer, n in compiled.items())
        return _verdict(
            False,
            last,
            f"the last start ({last['start_id']}) compiled what its warm snapshot {warm['name']!r} covers: {said}",
        )
    return _verdict(
        True,
        last,
        f"the last start ({last['start_id']}) compiled nothing its warm snapshot {warm['name']!r} covers "
        f"({', '.join(warm['covered'])})",
    )


def _verdict(passed: bool, start: dict[str, Any] | None, reason: str) -> dict[str, Any]:
    return {
        "passed": passed,
        "start_id": start["start_id"] if start else None,
        "reason": reason,
        "covered_compiles": start["covered_compiles"] if start else {},
        "misses": start["misses"] if start and not passed else [],
    }


def render(starts: list[dict[str, Any]]) -> str:
    """The starts side by side: one column per start (newest first), one row per layer and phase."""
    from jitguard.ledger.record import LAYERS, PHASES

    header = ["", *(s["start_id"] for s in starts)]
    rows: list[list[str]] = [
        ["engine", *(s["engine"] or "?" for s in starts)],
        ["ready after", *(_seconds(s["ready_after_s"]) for s in starts)],
        ["processes", *(str(len(s["processes"])) for s in starts)],
        ["warm snapshot", *(_warm(s["warm"]) for s in starts)],
    ]
    for name in LAYERS:
        if any(name in s["layers"] for s in starts):
            rows.append([name, *(_layer(s["layers"].get(name)) for s in starts)])
    rows.append(["jitguard", *(_seconds(s["jitguard_s"]) for s in starts)])
    for phase in PHASES:
        if any(phase in s["phases"] for s in starts):
            rows.append([f"  {phase}", *(_seconds(s["phases"].get(phase)) for s in starts)])
    rows.append(["must-hit misses", *(_misses(s) for s in starts)])
    table = [header, *rows]
    widths = [max(len(row[i]) for row in table) for i in range(len(header))]
    lines = ["  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row)).rstrip() for row in table]
    legend = (
        "each layer: compiled / from its cache / from the store (seconds); '+N late': compiled after ready"
    )
    return "\n".join([*lines, legend])


def _layer(counts: dict[str, Any] | None) -> str:
    if not counts:
        return "-"
    text = f"{counts['compiled']} / {counts['cached']} / {counts['restored']} ({counts['seconds']:.1f} s)"
    return text + (f" +{counts['after_ready']} late" if counts["after_ready"] else "")


def _warm(warm: dict[str, Any]) -> str:
    if warm["outcome"] == "none":
        return "-"
    return f"{warm['outcome']}" + (f" ({len(warm['covered'])} layers)" if warm["covered"] else "")


def _misses(start: dict[str, Any]) -> str:
    compiled = start["covered_compiles"]
    if not start["warm"]["covered"]:
        return "-"
    return str(sum(compiled.values())) if compiled else "0"


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f} s"
