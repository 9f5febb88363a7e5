"""Median wall time of `jitguard doctor --json` (goal <= 2 s) and of `import jitguard` (goal <= 100 ms).

Usage: python benchmarks/doctor.py [--repeat 7] [--out benchmarks/results/doctor.md]
Each sample is a fresh interpreter (what a user pays); the trial-link cache is warm after the first run, and the
first (cold) doctor run is reported separately.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path


def _time(cmd: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    return time.perf_counter() - start


def _pkg(name: str) -> str:
    try:
        return version(name)
    except PackageNotFoundError:
        return "-"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "doctor.md")
    args = parser.parse_args()

    cache = tempfile.mkdtemp(prefix="jitguard-bench-")
    env = {**os.environ, "JITGUARD_CACHE_DIR": cache}
    doctor = [sys.executable, "-m", "jitguard", "doctor", "--json"]
    importer = [sys.executable, "-c", "import jitguard"]
    bare = [sys.executable, "-c", "pass"]

    cold = _time(doctor, env)
    doctor_s = [_time(doctor, env) for _ in range(args.repeat)]
    import_s = [_time(importer, env) for _ in range(args.repeat)]
    bare_s = [_time(bare, env) for _ in range(args.repeat)]
    import_only = statistics.median(import_s) - statistics.median(bare_s)

    # In-process import cost, without interpreter start-up: what `import jitguard` adds to an engine.
    inproc = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", "import jitguard"], capture_output=True, text=True, env=env
    ).stderr.splitlines()
    cumulative_us = next(
        (int(line.split("|")[1]) for line in reversed(inproc) if line.rstrip().endswith(" jitguard")), 0
    )

    rows = [
        (
            "`jitguard doctor --json`, first run (cold trial-link cache)",
            f"{cold * 1000:.0f} ms",
            "<= 2000 ms",
        ),
        (
            f"`jitguard doctor --json`, median of {args.repeat}",
            f"{statistics.median(doctor_s) * 1000:.0f} ms",
            "<= 2000 ms",
        ),
        (
            "`import jitguard` (python -X importtime, cumulative)",
            f"{cumulative_us / 1000:.1f} ms",
            "<= 100 ms",
        ),
        (
            f"`python -c 'import jitguard'` minus `python -c pass`, medians of {args.repeat}",
            f"{import_only * 1000:.1f} ms",
            "<= 100 ms",
        ),
    ]
    lines = [
        "# jitguard doctor and import timings",
        "",
        f"Machine: {platform.node()}, {os.cpu_count()} CPUs, {platform.platform()}, Python {platform.python_version()}",
        f"Versions: jitguard {_pkg('jitguard')}, flashinfer-python {_pkg('flashinfer-python')}, "
        f"fla-core {_pkg('fla-core')}, torch {_pkg('torch')}",
        f"Command: `python benchmarks/doctor.py --repeat {args.repeat}`",
        "",
        "| measurement | result | goal |",
        "|---|---|---|",
        *[f"| {a} | {b} | {c} |" for a, b, c in rows],
        "",
    ]
    text = "\n".join(lines)
    print(text)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
