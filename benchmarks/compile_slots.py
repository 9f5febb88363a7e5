"""Several builds at once on one host: how each way of holding a host-wide compile budget keeps it.

The scenario: ``--builds`` ninja projects built at the same time, each ``--steps`` compile steps and one link
step, each build allowed ``--jobs`` jobs by its own memory plan, the host allowing ``--slots`` compile jobs in
all. A step is a real ``g++ -O2 -c`` of a generated C++ file (``--step gxx``) or a stand-in that holds
``--mib`` MiB for ``--seconds`` (``--step sleep``: the same timing on a busy shared machine). Every step
appends its start and end to one journal, so the most steps that ran at once is read, not assumed.

Mechanisms (``--mechanisms``, comma separated):

    plain        every build: plain ``ninja -j JOBS`` (no host budget: the control)
    slots        every build: ``jitguard build ninja --jobs JOBS`` (today: every compile command behind the slot
                 launcher, one flock'ed slot per running compile, shared through one cache dir)
    reservation  every build: take up to JOBS of the same flock'ed slots before ninja starts (at least one,
                 waiting for it), then plain ``ninja -j TAKEN`` on the original build.ninja
    jobserver    every build: ninja >= 1.13 (``--jobserver-ninja``) as a GNU make jobserver client of one host
                 FIFO holding SLOTS - 1 tokens (each client also runs one job on its implicit slot), no -j

Per row: wall time of the whole scenario, the most steps at once, the mean steps at once over the wall time,
and the peak RSS of everything the builds ran (sampled every 0.1 s). ``--leak`` adds the jobserver's tokens
before and after a client ninja is SIGKILLed mid-build. ``--overhead`` times what today's mechanism adds to a
build before ninja starts: the wrapped manifest, two ``ninja -t compdb`` and the two ``.ninja_log``
translations.

    python benchmarks/compile_slots.py --jobserver-ninja PATH [--step gxx|sleep] [--repeat 3] \\
        [--out benchmarks/results/compile_slots]
"""

from __future__ import annotations

import argparse
import array
import fcntl
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import termios
import threading
import time
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import psutil

REPO = Path(__file__).resolve().parent.parent
MIB = 1 << 20

# One compile step: journal its start and end around the real work.
STEP = """\
import os, subprocess, sys, time
journal, out, kind, seconds, mib = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4]), int(sys.argv[5])
def note(what):
    with open(journal, "a") as f:
        f.write(f"{what} {os.getpid()} {time.time():.6f}\\n")
note("start")
if kind == "sleep":
    held = bytearray(mib << 20)
    for i in range(0, len(held), 4096):
        held[i] = 1
    time.sleep(seconds)
    open(out, "w").close()
else:
    subprocess.run(sys.argv[6:], check=True)
note("end")
"""

# A translation unit that keeps g++ -O2 busy for a second or two and ~90 MiB.
SOURCE = """\
#include <algorithm>
#include <map>
#include <string>
#include <vector>
template <int N> struct Unit {{
  static std::map<std::string, std::vector<double>> run(std::vector<std::string> words) {{
    std::map<std::string, std::vector<double>> out;
    std::sort(words.begin(), words.end());
    for (const auto& w : words) out[w + std::to_string(N)].push_back(N);
    return out;
  }}
}};
{instances}
"""


def _write_project(
    root: Path, *, index: int, steps: int, kind: str, seconds: float, mib: int, journal: Path
) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "step.py").write_text(STEP)
    step = f"{sys.executable} step.py {journal}"
    lines = []
    if kind == "gxx":
        lines += [
            "rule cxx",
            f"  command = {step} $out gxx 0 0 g++ -O2 -fPIC -c $in -o $out",
            "rule link",
            f"  command = {step} $out gxx 0 0 g++ -shared $in -o $out",
        ]
    else:
        lines += [
            "rule cxx",
            f"  command = {step} $out sleep {seconds} {mib}",
            "rule link",
            f"  command = {step} $out sleep {seconds / 4} {mib // 4}",
        ]
    objects = []
    for i in range(steps):
        instances = "\n".join(f"template struct Unit<{index * 1000 + i * 10 + k}>;" for k in range(2))
        (root / f"unit{i}.cc").write_text(SOURCE.format(instances=instances))
        lines.append(f"build unit{i}.o: cxx unit{i}.cc")
        objects.append(f"unit{i}.o")
    lines.append(f"build lib.so: link {' '.join(objects)}")
    lines.append("default lib.so")
    manifest = root / "build.ninja"
    manifest.write_text("\n".join(lines) + "\n")
    return manifest


def _overlap(journal: Path, wall: float) -> tuple[int, float, float]:
    """(most steps at once, mean steps at once over ``wall``, step-seconds)."""
    events: list[tuple[float, int]] = []
    starts: dict[str, float] = {}
    busy = 0.0
    for line in journal.read_text().splitlines():
        kind, pid, stamp = line.split()
        events.append((float(stamp), 1 if kind == "start" else -1))
        if kind == "start":
            starts[pid] = float(stamp)
        else:
            busy += float(stamp) - starts.pop(pid, float(stamp))
    events.sort()
    running = peak = 0
    for _, delta in events:
        running += delta
        peak = max(peak, running)
    return peak, busy / wall if wall > 0 else 0.0, busy


class _Sampler:
    """Peak summed RSS of every descendant of this process."""

    def __init__(self) -> None:
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        me = psutil.Process()
        while not self._stop.wait(0.1):
            total = 0
            for child in me.children(recursive=True):
                try:
                    total += child.memory_info().rss
                except psutil.Error:
                    continue
            self.peak = max(self.peak, total)

    def __enter__(self) -> _Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def _env() -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=str(REPO / "src"))


def _start_plain(manifest: Path, jobs: int, ctx: dict[str, Any]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(["ninja", "-C", str(manifest.parent), "-j", str(jobs)], stdout=subprocess.DEVNULL)


def _start_slots(manifest: Path, jobs: int, ctx: dict[str, Any]) -> subprocess.Popen[bytes]:
    command = [sys.executable, "-m", "jitguard.cli", "build", "ninja", str(manifest), "--jobs", str(jobs)]
    command += ["--progress", "none"]
    env = dict(_env(), JITGUARD_CACHE_DIR=str(ctx["cache"]))
    return subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL)


RESERVE = """\
import subprocess, sys
from jitguard.supervise import slots
directory, host, want, ninja, root = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5]
held = [slots.acquire(directory, host)]
while len(held) < want:
    more = slots.try_acquire(directory, host)
    if more is None:
        break
    held.append(more)
done = subprocess.run([ninja, "-C", root, "-j", str(len(held))], stdout=subprocess.DEVNULL,
                      pass_fds=[s.fd for s in held])
sys.exit(done.returncode)
"""


def _start_reservation(manifest: Path, jobs: int, ctx: dict[str, Any]) -> subprocess.Popen[bytes]:
    slots_dir = ctx["cache"] / "reserved-slots"
    command = [sys.executable, "-c", RESERVE, str(slots_dir), str(ctx["slots"]), str(jobs), "ninja"]
    return subprocess.Popen([*command, str(manifest.parent)], env=_env())


def _fifo_tokens(path: Path) -> int:
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        count = array.array("i", [0])
        fcntl.ioctl(fd, termios.FIONREAD, count)
        return count[0]
    finally:
        os.close(fd)


def _open_pool(path: Path, tokens: int) -> int:
    """A jobserver FIFO holding ``tokens`` tokens; the returned descriptor keeps it open."""
    os.mkfifo(path)
    fd = os.open(path, os.O_RDWR)
    os.write(fd, b"+" * tokens)
    return fd


def _start_jobserver(manifest: Path, jobs: int, ctx: dict[str, Any]) -> subprocess.Popen[bytes]:
    env = dict(os.environ, MAKEFLAGS=f"--jobserver-auth=fifo:{ctx['fifo']}")
    return subprocess.Popen([ctx["ninja113"], "-C", str(manifest.parent)], env=env, stdout=subprocess.DEVNULL)


STARTERS: dict[str, Callable[[Path, int, dict[str, Any]], subprocess.Popen[bytes]]] = {
    "plain": _start_plain,
    "slots": _start_slots,
    "reservation": _start_reservation,
    "jobserver": _start_jobserver,
}


def run_scenario(mechanism: str, args: argparse.Namespace, work: Path) -> dict[str, Any]:
    journal = work / "journal.txt"
    journal.touch()
    manifests = [
        _write_project(
            work / f"build{i}",
            index=i,
            steps=args.steps,
            kind=args.step,
            seconds=args.seconds,
            mib=args.mib,
            journal=journal,
        )
        for i in range(args.builds)
    ]
    ctx: dict[str, Any] = {"cache": work / "cache", "slots": args.slots, "ninja113": args.jobserver_ninja}
    pool = None
    if mechanism == "jobserver":
        ctx["fifo"] = work / "jobserver.fifo"
        pool = _open_pool(ctx["fifo"], args.slots - 1)
    started = time.monotonic()
    with _Sampler() as sampler:
        procs = [STARTERS[mechanism](m, args.jobs, ctx) for m in manifests]
        codes = [p.wait() for p in procs]
    wall = time.monotonic() - started
    if pool is not None:
        os.close(pool)
    peak, mean, busy = _overlap(journal, wall)
    return {
        "mechanism": mechanism,
        "ok": all(c == 0 for c in codes) and all((m.parent / "lib.so").exists() for m in manifests),
        "wall_s": round(wall, 2),
        "max_at_once": peak,
        "mean_at_once": round(mean, 2),
        "step_s": round(busy, 1),
        "peak_rss_mib": round(sampler.peak / MIB),
    }


def measure_leak(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    """Tokens of a jobserver pool before and after one client ninja is SIGKILLed while its jobs run."""
    journal = work / "journal.txt"
    manifest = _write_project(
        work / "victim", index=0, steps=4, kind="sleep", seconds=2.0, mib=16, journal=journal
    )
    journal.touch()
    fifo = work / "jobserver.fifo"
    pool = _open_pool(fifo, args.slots - 1)
    before = _fifo_tokens(fifo)
    env = dict(os.environ, MAKEFLAGS=f"--jobserver-auth=fifo:{fifo}")
    ninja = subprocess.Popen(
        [args.jobserver_ninja, "-C", str(manifest.parent)],
        env=env,
        stdout=subprocess.DEVNULL,
        start_new_session=True,
    )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and journal.read_text().count("start") < min(args.slots, 4):
        time.sleep(0.05)
    ninja.send_signal(signal.SIGKILL)
    ninja.wait()
    time.sleep(2.5 + 1.0)  # the orphaned steps finish; nobody hands their tokens back
    after = _fifo_tokens(fifo)
    os.close(pool)
    return {"mechanism": "jobserver-leak", "tokens_before": before, "tokens_after_sigkill": after}


def measure_overhead(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    """What today's mechanism does before ninja starts, for one build of ``--steps`` steps."""
    sys.path.insert(0, str(REPO / "src"))
    from jitguard.supervise import manifest as wrapping
    from jitguard.supervise import ninja_log

    original = _write_project(
        work / "overhead", index=0, steps=args.steps, kind=args.step, seconds=0.1, mib=1, journal=work / "j"
    )
    wrapped = work / "wrapped.ninja"
    subprocess.run(["ninja", "-C", str(original.parent)], check=True, capture_output=True)
    started = time.perf_counter()
    wrapping.write_wrapped(original, wrapped, wrapping.launcher_prefix())
    record = ninja_log.log_path(original.parent, original)
    plain = ninja_log.compdb("ninja", original.parent, original)
    ours = ninja_log.compdb("ninja", original.parent, wrapped)
    added = ninja_log.translate(record, plain, ours)
    added += ninja_log.translate(record, ours, plain)
    elapsed = time.perf_counter() - started
    return {
        "mechanism": "slots-overhead",
        "ms_per_build": round(elapsed * 1000, 1),
        "log_entries_added": added,
    }


def _version(command: list[str]) -> str:
    try:
        return (
            subprocess.run(command, capture_output=True, text=True, timeout=30).stdout.splitlines()[0].strip()
        )
    except (OSError, IndexError, subprocess.TimeoutExpired):
        return "absent"


def machine(args: argparse.Namespace) -> dict[str, Any]:
    commit = _version(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"])
    return {
        "host": platform.node(),
        "cpus": os.cpu_count(),
        "memory_gib": round(psutil.virtual_memory().total / (1 << 30), 1),
        "kernel": platform.release(),
        "python": platform.python_version(),
        "ninja": _version(["ninja", "--version"]),
        "jobserver_ninja": _version([args.jobserver_ninja, "--version"])
        if args.jobserver_ninja
        else "absent",
        "gxx": _version(["g++", "--version"]),
        "load_before": round(os.getloadavg()[0], 2),
        "commit": commit,
        "date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
    }


def render(rows: list[dict[str, Any]], about: dict[str, Any], args: argparse.Namespace) -> str:
    scenario = [r for r in rows if "wall_s" in r]
    lines = [
        "# Host-wide compile budget: several builds at once",
        "",
        f"Generated by `python benchmarks/compile_slots.py {' '.join(args.argv)}`.",
        "",
        f"Machine: {about['host']}, {about['cpus']} CPUs, {about['memory_gib']} GiB, Linux {about['kernel']}, "
        f"Python {about['python']}, ninja {about['ninja']} (system), ninja {about['jobserver_ninja']} "
        f"(pip wheel, for the jobserver), {about['gxx']}; jitguard {about['commit']}; {about['date']}; "
        f"load average before: {about['load_before']}.",
        "",
        f"Scenario: {args.builds} builds at once, each {args.steps} `{args.step}` steps + 1 link step, "
        f"each build planned {args.jobs} jobs, the host allowing {args.slots} at once. "
        f"Median of {args.repeat} runs (max of the per-run maxima for `max at once`).",
        "",
        "| mechanism | all built | wall s (median) | wall s (runs) | max steps at once | mean at once | peak RSS MiB |",
        "|---|---|---|---|---|---|---|",
    ]
    for mechanism in dict.fromkeys(r["mechanism"] for r in scenario):
        mine = [r for r in scenario if r["mechanism"] == mechanism]
        walls = [r["wall_s"] for r in mine]
        lines.append(
            f"| {mechanism} | {all(r['ok'] for r in mine)} | {statistics.median(walls):.1f} | "
            f"{', '.join(f'{w:.1f}' for w in walls)} | {max(r['max_at_once'] for r in mine)} | "
            f"{statistics.median(r['mean_at_once'] for r in mine):.2f} | "
            f"{statistics.median(r['peak_rss_mib'] for r in mine):.0f} |"
        )
    for r in rows:
        if r["mechanism"] == "jobserver-leak":
            lines += [
                "",
                f"Jobserver pool after a SIGKILLed client: {r['tokens_before']} tokens before, "
                f"{r['tokens_after_sigkill']} after (its jobs finished; the tokens it held are gone for good).",
            ]
        if r["mechanism"] == "slots-overhead":
            lines += [
                "",
                f"Today's per-build preparation (wrapped manifest, 2 x `ninja -t compdb`, 2 `.ninja_log` "
                f"translations, {r['log_entries_added']} entries added): {r['ms_per_build']} ms.",
            ]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--builds", type=int, default=4)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--jobs", type=int, default=2, help="jobs each build's own plan allows")
    parser.add_argument("--slots", type=int, default=2, help="compile jobs the host allows at once")
    parser.add_argument("--step", choices=("gxx", "sleep"), default="gxx")
    parser.add_argument("--seconds", type=float, default=1.5, help="--step sleep: how long a step takes")
    parser.add_argument("--mib", type=int, default=100, help="--step sleep: memory a step holds")
    parser.add_argument("--mechanisms", default="plain,slots,reservation,jobserver")
    parser.add_argument("--jobserver-ninja", default="", help="a ninja >= 1.13 (the pip wheel's)")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--out", type=Path, default=None, help="write <out>.jsonl and <out>.md")
    args = parser.parse_args()
    args.argv = sys.argv[1:]
    mechanisms = [m for m in args.mechanisms.split(",") if m]
    if "jobserver" in mechanisms and not args.jobserver_ninja:
        parser.error(
            "the jobserver mechanism needs --jobserver-ninja PATH (ninja >= 1.13, e.g. the pip wheel's)"
        )
    about = machine(args)
    rows: list[dict[str, Any]] = []
    for run in range(args.repeat):
        for mechanism in mechanisms:
            with tempfile.TemporaryDirectory(prefix="compile-slots-") as tmp:
                row = run_scenario(mechanism, args, Path(tmp))
            row["run"] = run
            print(json.dumps(row), flush=True)
            rows.append(row)
    with tempfile.TemporaryDirectory(prefix="compile-slots-") as tmp:
        rows.append(measure_overhead(args, Path(tmp)))
    if args.jobserver_ninja:
        with tempfile.TemporaryDirectory(prefix="compile-slots-") as tmp:
            rows.append(measure_leak(args, Path(tmp)))
    for row in rows[-2:]:
        print(json.dumps(row), flush=True)
    text = render(rows, about, args)
    print(text)
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        with open(args.out.with_suffix(".jsonl"), "w") as f:
            for row in rows:
                f.write(json.dumps({**row, **about}) + "\n")
        args.out.with_suffix(".md").write_text(text)


if __name__ == "__main__":
    main()
