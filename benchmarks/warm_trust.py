"""The trusted store's cost: save and restore of a real 3,000-file, 100 MiB warm snapshot through a ``file://``
store, each in a fresh process, with the time, peak memory (max RSS) and peak open descriptors of that process,
for the code at this checkout and at a baseline commit (the store before the trust work), and the memory a
manifest at the size cap costs to parse.

    python benchmarks/warm_trust.py --baseline 12201e3 --out benchmarks/results

The snapshot has Triton's shape: 100 kernel directories of 30 files (json, cubin, source), sizes spread from
200 bytes to 256 KiB (median ~4 KiB), 100 MiB in all; one process saves it, another restores it into another
root. Peak descriptors are sampled from ``/proc/<pid>/fd`` every 2 ms. Median of ``--repeats`` runs.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import random
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent.parent

CHILD = r"""
import json, sys, time
from pathlib import Path
from jitguard.facts.jit_caches import CacheLayer
from jitguard.fleet.artifact_store import ArtifactStore
from jitguard.fleet.snapshot import StackKey
from jitguard.fleet import warm_transfer
action, root, store_url = sys.argv[1], Path(sys.argv[2]), sys.argv[3]
stack = StackKey({"python": "bench"}, "sm_90")
store = ArtifactStore(store_url, timeout=600)
layers = (CacheLayer("triton", root, None),)
started = time.monotonic()
if action == "save":
    saved = warm_transfer.save(store, stack, "bench", layers)
    count = len(saved.snapshot.files)
elif action == "restore":
    snapshot = warm_transfer.fetch_manifest(store, stack, "bench")[0]
    restored = warm_transfer.restore(store, snapshot, layers)
    count = restored.landed
else:
    snapshot = warm_transfer.fetch_manifest(store, stack, "bench")[0]
    count = len(snapshot.files)
import resource
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps({"seconds": time.monotonic() - started, "files": count, "peak_rss_mib": peak}))
"""


def make_tree(root: Path, files: int, total: int, seed: int = 7) -> int:
    rng = random.Random(seed)
    sizes = [int(200 * (1300 ** rng.random())) for _ in range(files)]  # 200 B .. 260 KiB, log-uniform
    scale = total / sum(sizes)
    written = 0
    for i, size in enumerate(sizes):
        path = root / f"{i % 100:02d}{'K' * 8}" / f"kernel_{i}.{('json', 'cubin', 'source')[i % 3]}"
        path.parent.mkdir(parents=True, exist_ok=True)
        data = rng.randbytes(max(1, int(size * scale)))
        path.write_bytes(data)
        written += len(data)
    return written


def run_child(src: Path, args: list[str]) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": str(src)}
    proc = subprocess.Popen(
        [sys.executable, "-c", CHILD, *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=_no_descriptor_limit,
    )
    peak_fds = 0
    done = threading.Event()

    def sample() -> None:
        nonlocal peak_fds
        while not done.is_set():
            with contextlib.suppress(OSError):
                peak_fds = max(peak_fds, len(os.listdir(f"/proc/{proc.pid}/fd")))
            time.sleep(0.002)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    out, err = proc.communicate(timeout=900)
    done.set()
    sampler.join()
    if proc.returncode != 0:
        raise SystemExit(f"child failed ({args[0]}): {err[-3000:]}")
    result: dict[str, float] = json.loads(out.strip().splitlines()[-1])
    result["peak_fds"] = peak_fds
    return result


def _no_descriptor_limit() -> None:
    """The soft descriptor limit raised to the hard one: the baseline holds one per staged file, and its peak
    is what is measured (under a common ``ulimit -n 1024`` it fails instead)."""
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def measure(src: Path, work: Path, repeats: int) -> dict[str, dict[str, float]]:
    rows: dict[str, list[dict[str, float]]] = {"save": [], "restore": []}
    for i in range(repeats):
        store = work / f"store-{src.name}-{i}"
        store.mkdir()
        url = f"file://{store}"
        rows["save"].append(run_child(src, ["save", str(work / "host-a"), url]))
        target = work / f"host-b-{src.name}-{i}"
        rows["restore"].append(run_child(src, ["restore", str(target), url]))
        shutil.rmtree(target)
        shutil.rmtree(store)
    return {
        action: {key: statistics.median(r[key] for r in runs) for key in runs[0]}
        for action, runs in rows.items()
    }


def manifest_memory(src: Path, work: Path) -> dict[str, float]:
    """Parse a manifest just under the cap (MAX_MANIFEST_BYTES): its size and the parsing process's peak."""
    sys.path.insert(0, str(src))
    from jitguard.fleet.snapshot import MAX_FILES, MAX_MANIFEST_BYTES, SCHEMA, StackKey
    from jitguard.fleet.warm_transfer import manifest_name

    stack = StackKey({"python": "bench"}, "sm_90")
    files = []
    body = b""
    count = 0
    while True:
        files.append(
            {
                "path": f"{count % 1000:03d}{'K' * 20}/kernel_{count}.cubin",
                "size": 4096,
                "sha256": f"{count:064x}",
                "mode": 420,
            }
        )
        count += 1
        if count % 5000 == 0:
            body = json.dumps(_doc(SCHEMA, stack, files)).encode()
            if len(body) > MAX_MANIFEST_BYTES * 0.95 or count >= MAX_FILES:
                break
    store = work / "store-manifest"
    path = store / "v1" / manifest_name(stack, "bench")
    path.parent.mkdir(parents=True)
    path.write_bytes(body)
    result = run_child(src, ["show", str(work / "empty"), f"file://{store}"])
    return {
        "manifest_mib": len(body) / 2**20,
        "files": count,
        "peak_rss_mib": result["peak_rss_mib"],
        "seconds": result["seconds"],
    }


def _doc(schema: str, stack: object, files: list[dict[str, object]]) -> dict[str, object]:
    return {
        "schema": schema,
        "name": "bench",
        "stack": dict(stack.material),  # type: ignore[attr-defined]
        "stack_digest": stack.digest,  # type: ignore[attr-defined]
        "arch": "sm_90",
        "created": time.time(),
        "publisher": "bench",
        "jitguard": "0",
        "layers": {"triton": {"root": "/x", "files": files}},
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--baseline", default="12201e3", help="the commit to compare with")
    parser.add_argument("--files", type=int, default=3000)
    parser.add_argument("--mib", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path, default=HERE / "benchmarks" / "results")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="jitguard-warm-trust-") as tmp:
        work = Path(tmp)
        old = work / "baseline"
        subprocess.run(
            ["git", "-C", str(HERE), "worktree", "add", "--detach", str(old), args.baseline],
            check=True,
            capture_output=True,
        )
        try:
            written = make_tree(work / "host-a", args.files, args.mib * 2**20)
            results = {
                "baseline": measure(old / "src", work, args.repeats),
                "now": measure(HERE / "src", work, args.repeats),
            }
            results["manifest"] = manifest_memory(HERE / "src", work)  # type: ignore[assignment]
        finally:
            subprocess.run(["git", "-C", str(HERE), "worktree", "remove", "--force", str(old)], check=False)
    record: dict[str, Any] = {
        "machine": f"{platform.node()}: {os.cpu_count()} CPUs, {platform.platform()}, Python {platform.python_version()}",
        "date": time.strftime("%Y-%m-%d"),
        "baseline_commit": args.baseline,
        "now_commit": subprocess.run(
            ["git", "-C", str(HERE), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
        ).stdout.strip(),
        "files": args.files,
        "bytes": written,
        "repeats": args.repeats,
        "results": results,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "warm_trust.json").write_text(json.dumps(record, indent=1) + "\n")
    (args.out / "warm_trust.md").write_text(render(record))
    print(render(record))


def render(record: dict[str, Any]) -> str:
    results = record["results"]
    lines = [
        "# Warm snapshot save and restore: cost of the trust work",
        "",
        f"`python benchmarks/warm_trust.py --baseline {record['baseline_commit']}` on {record['machine']}, "
        f"{record['date']}; {record['files']} files, {record['bytes'] / 2**20:.1f} MiB, a `file://` store on the "
        f"same disk, each step a fresh process, median of {record['repeats']}. Baseline: {record['baseline_commit']} "
        f"(the store before the trust work); now: {record['now_commit']}.",
        "",
        "| step | code | seconds | peak RSS (MiB) | peak open descriptors |",
        "|---|---|---|---|---|",
    ]
    for step in ("save", "restore"):
        for code in ("baseline", "now"):
            r = results[code][step]
            lines.append(
                f"| {step} | {code} | {r['seconds']:.2f} | {r['peak_rss_mib']:.0f} | {r['peak_fds']:.0f} |"
            )
    m = results["manifest"]
    lines += [
        "",
        f"A manifest at the cap ({m['manifest_mib']:.1f} MiB, {m['files']} files: the most a manifest may list) parsed by `warm show`'s "
        f"path (fetch and check): peak RSS {m['peak_rss_mib']:.0f} MiB in {m['seconds']:.2f} s "
        f"({m['peak_rss_mib'] / m['manifest_mib']:.1f}x its size, the interpreter's own ~20 MiB included).",
        "",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
