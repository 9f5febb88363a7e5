"""The CLI contract as a matrix: every command and subcommand the argparse parser knows (so a new one is in it
the day it lands), run as a real process in each bad state that matters to it, with and without ``--json``.

``run_matrix()`` runs every cell (in parallel subprocesses) and returns the results; test_cli_matrix.py checks
the contract on each; ``python tests/real/cli/cli_matrix.py`` regenerates benchmarks/results/cli_matrix.md (each
cell's exit code and first line). Every run's stdout and stderr are pipes, so "output to a pipe" is every cell;
``pipe-closed`` also closes the reading end at once (``jitguard doctor | head -0``).
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
SRC = ROOT / "src"
TABLE = ROOT / "benchmarks" / "results" / "cli_matrix.md"
RUN_TIMEOUT_S = 120
# Ctrl-C: 130, or death by SIGINT when it lands while Python is already shutting down (a shell's $? is 130
# either way); a command already done by then exits as it would have.
INTERRUPTED_CODES = (0, 1, 2, 130, -signal.SIGINT)

# The arguments a command needs to do its work here ("{ninja}", "{store}" filled in). A command not listed
# runs with none: a new one is still in the matrix, and at worst it is a usage error (exit 2), also checked.
ARGUMENTS: dict[tuple[str, ...], tuple[str, ...]] = {
    ("build", "ninja"): ("{ninja}", "--progress", "none"),
    ("cache", "clear"): ("--yes",),
    ("gdn", "run"): ("--repeat", "0", "--device", "cpu"),
    ("warm", "save"): ("--arch", "9.0", "--layers", "jitguard"),
    ("warm", "restore"): ("--arch", "9.0", "--layers", "jitguard"),
    ("warm", "show"): ("--arch", "9.0"),
}
# Too slow for the matrix (a real compile): run in tests/real/cli/test_doctor.py instead.
SKIPPED_FLAGS = ("--compile",)


@dataclass(frozen=True)
class State:
    """A bad state: variables on top of the base environment (``{tmp}`` filled in), files made in the run's
    directory by ``setup``, and whether the command runs inside a read-only mount of its cache dir."""

    name: str
    what: str
    env: tuple[tuple[str, str], ...] = ()
    setup: Callable[[Path], None] | None = None
    read_only_cache: bool = False
    close_stdout: bool = False
    interrupt_after: float | None = None  # SIGINT to the process group (Ctrl-C) this many seconds in
    no_nvcc: bool = False  # no nvcc on PATH
    json_too: bool = True
    only: tuple[tuple[str, ...], ...] = ()  # the commands it matters to (empty: all)


def _cache_is_a_file(tmp: Path) -> None:
    (tmp / "cache-file").write_text("a file where the cache dir should be\n")


def _unreadable_files(tmp: Path) -> None:
    """A cache dir whose records are a FIFO and random bytes; a ninja file and a model config that are FIFOs."""
    outcomes = tmp / "cache" / "outcomes"
    outcomes.mkdir(parents=True, exist_ok=True)
    os.mkfifo(outcomes / "gdn_prefill_sm90@0000000000000000.json")
    (outcomes / "sampling@1111111111111111.json").write_bytes(os.urandom(300))
    (tmp / "cache" / "job_memory").mkdir(exist_ok=True)
    (tmp / "cache" / "job_memory" / "gdn_prefill_sm90.json").write_bytes(b"\xff\xfe{")
    os.mkfifo(tmp / "fifo.ninja")


def _no_torch(tmp: Path) -> None:
    shadow = tmp / "no-torch"
    shadow.mkdir(exist_ok=True)  # `import torch` fails here as it does where torch is not installed
    (shadow / "torch.py").write_text("raise ModuleNotFoundError(\"No module named 'torch'\", name='torch')\n")


STATES: tuple[State, ...] = (
    State("plain", "no GPU (this machine), an empty cache dir, a file:// store"),
    State("no-torch", "`import torch` fails", (("PYTHONPATH", "{tmp}/no-torch"),), _no_torch),
    State(
        "cache-file",
        "JITGUARD_CACHE_DIR is a file",
        (("JITGUARD_CACHE_DIR", "{tmp}/cache-file"),),
        _cache_is_a_file,
    ),
    State("cache-read-only", "the cache dir is a read-only file system", read_only_cache=True),
    State(
        "no-cuda-toolkit",
        "no nvcc on PATH, CUDA_HOME an empty directory",
        (("CUDA_HOME", "{tmp}/no-cuda"),),
        lambda tmp: (tmp / "no-cuda").mkdir(),
        no_nvcc=True,
        only=(("doctor",), ("build", "flashinfer-gdn"), ("gdn", "explain")),
    ),
    State(
        "unreadable-file",
        "cache records a FIFO and random bytes; the ninja file a FIFO",
        setup=_unreadable_files,
    ),
    State(
        "store-unreachable",
        "JITGUARD_SHARE an s3:// store on a closed port",
        (
            ("JITGUARD_SHARE", "s3://jitguard-matrix/prefix"),
            ("AWS_ENDPOINT_URL", "http://127.0.0.1:9"),
            ("AWS_ACCESS_KEY_ID", "matrix"),
            ("AWS_SECRET_ACCESS_KEY", "matrix"),
            ("JITGUARD_SHARE_TIMEOUT", "10s"),
        ),
        only=(("build", "ninja"), ("warm", "save"), ("warm", "restore"), ("warm", "show")),
    ),
    State(
        "bad-variables",
        "JITGUARD_CGROUP=v3, JITGUARD_FAILURE_TTL=forever, JITGUARD_GDN_BACKEND=fastest",
        (("JITGUARD_CGROUP", "v3"), ("JITGUARD_FAILURE_TTL", "forever"), ("JITGUARD_GDN_BACKEND", "fastest")),
    ),
    State("ascii", "PYTHONIOENCODING=ascii", (("PYTHONIOENCODING", "ascii"),), json_too=False),
    State(
        "interrupted",
        "Ctrl-C (SIGINT to the process group) 1 s in: exit 130, or the command was already done",
        interrupt_after=1.0,
        only=(("gdn", "run"), ("doctor",)),
    ),
    State(
        "pipe-closed",
        "stdout's reader gone at once",
        close_stdout=True,
        only=(("doctor",), ("cache", "list"), ("gdn", "explain")),
    ),
)


def commands(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> dict[tuple[str, ...], bool]:
    """Every command path the parser knows -> whether it takes --json (groups: False)."""
    groups = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    found = {path: not groups and "--json" in parser._option_string_actions}
    for group in groups:
        for name, sub in group.choices.items():
            found.update(commands(sub, (*path, name)))
    return found


@dataclass(frozen=True)
class Cell:
    command: tuple[str, ...]
    state: State
    json: bool

    @property
    def id(self) -> str:
        return f"{' '.join(self.command) or 'jitguard'} [{self.state.name}]{' --json' if self.json else ''}"


@dataclass(frozen=True)
class Result:
    cell: Cell
    argv: tuple[str, ...]
    returncode: int | None  # None: it ran past RUN_TIMEOUT_S
    stdout: str
    stderr: str
    tmp: str

    def first_line(self) -> str:
        """What a person reads first: on failure jitguard's own message line, else the first line printed
        (log lines without their time)."""
        lines = [line.rstrip() for line in self.stderr.splitlines() if line.strip()]
        lines = [line for line in lines if not line.startswith(("usage:", " "))]  # argparse's usage block
        said = [line for line in lines if not _LOG_TIME.match(line)]
        logs = [_LOG_TIME.sub("", line) for line in lines if _LOG_TIME.match(line)]
        printed = [line.strip() for line in self.stdout.splitlines() if line.strip()]
        message = [line for line in said if line.startswith("jitguard")] or said
        shown = (message if self.returncode else []) or printed or said or logs or [""]
        text = shown[0].replace(self.tmp, "<tmp>")
        return text if len(text) <= 110 else text[:107] + "..."


_LOG_TIME = re.compile(r"^\d\d:\d\d:\d\d (DEBUG|INFO|WARNING|ERROR) ")


def cells() -> list[Cell]:
    sys.path.insert(0, str(SRC))
    from jitguard.cli import build_parser

    found = []
    for command, takes_json in sorted(commands(build_parser()).items()):
        for state in STATES:
            if state.only and command not in state.only:
                continue
            found.append(Cell(command, state, False))
            if takes_json and state.json_too:
                found.append(Cell(command, state, True))
    return found


def _base_env(tmp: Path) -> dict[str, str]:
    path = [d for d in os.environ.get("PATH", "").split(os.pathsep) if d]
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("JITGUARD_", "FLASHINFER_", "AWS_", "PYTHONPATH", "PYTHONIOENCODING"))
    }
    env.update(
        {
            "PATH": os.pathsep.join(path),
            "CUDA_VISIBLE_DEVICES": "",
            "JITGUARD_CACHE_DIR": str(tmp / "cache"),
            "JITGUARD_SHARE": f"file://{tmp / 'store'}",
            "FLASHINFER_WORKSPACE_BASE": str(tmp / "workspace"),
            "XDG_CACHE_HOME": str(tmp / "xdg"),
            "TRITON_CACHE_DIR": str(tmp / "triton"),
            "NO_COLOR": "1",
        }
    )
    return env


def _prepare(tmp: Path) -> None:
    (tmp / "store").mkdir()
    project = tmp / "project"
    project.mkdir()
    (project / "build.ninja").write_text("rule touch\n  command = touch $out\nbuild done.txt: touch\n")


def read_only_mount_works() -> bool:
    """Whether a private mount namespace with a read-only tmpfs can be made here (root, unshare)."""
    if shutil.which("unshare") is None or os.geteuid() != 0:
        return False
    with tempfile.TemporaryDirectory() as tmp:
        done = subprocess.run(
            ["unshare", "-m", "sh", "-c", f"mount -t tmpfs -o ro tmpfs {tmp} && ! touch {tmp}/x 2>/dev/null"],
            capture_output=True,
            timeout=30,
        )
    return done.returncode == 0


def run_cell(cell: Cell, root: Path) -> Result:
    tmp = Path(tempfile.mkdtemp(prefix="cell-", dir=root))
    _prepare(tmp)
    if cell.state.setup is not None:
        cell.state.setup(tmp)
    env = _base_env(tmp)
    env.update({k: v.format(tmp=tmp) for k, v in cell.state.env})
    if cell.state.no_nvcc:
        dirs = env["PATH"].split(os.pathsep)
        env["PATH"] = os.pathsep.join(d for d in dirs if not (Path(d) / "nvcc").exists())
    env["PYTHONPATH"] = os.pathsep.join(p for p in (env.get("PYTHONPATH"), str(SRC)) if p)
    ninja = tmp / ("fifo.ninja" if cell.state.name == "unreadable-file" else "project/build.ninja")
    args = [a.format(ninja=ninja, store=tmp / "store") for a in ARGUMENTS.get(cell.command, ())]
    argv = [sys.executable, "-m", "jitguard", *cell.command, *args, *(["--json"] if cell.json else [])]
    if cell.state.read_only_cache:
        (tmp / "cache").mkdir()
        mount = f'mount -t tmpfs -o ro,mode=0700 tmpfs "{tmp / "cache"}" && exec "$@"'
        argv = ["unshare", "-m", "sh", "-c", mount, "sh", *argv]
    with subprocess.Popen(
        argv,
        env=env,
        cwd=tmp,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    ) as proc:
        if cell.state.close_stdout:
            assert proc.stdout is not None
            proc.stdout.close()  # the reader is gone before the first write: EPIPE
        try:
            if cell.state.interrupt_after is not None:
                try:
                    out, err = proc.communicate(timeout=cell.state.interrupt_after)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGINT)
            out, err = proc.communicate(timeout=RUN_TIMEOUT_S)
            code: int | None = proc.returncode
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
            out, err = proc.communicate()
            code = None
    decode = lambda b: (b or b"").decode("utf-8", "replace")  # noqa: E731
    return Result(cell, tuple(argv), code, decode(out), decode(err), str(tmp))


def run_matrix(root: Path, chosen: list[Cell] | None = None, workers: int | None = None) -> dict[str, Result]:
    """Every cell, run in parallel subprocesses (a worker per CPU, at least 2)."""
    chosen = cells() if chosen is None else chosen
    if not read_only_mount_works():
        chosen = [c for c in chosen if not c.state.read_only_cache]
    with ThreadPoolExecutor(max_workers=workers or max(2, os.cpu_count() or 2)) as pool:
        return {r.cell.id: r for r in pool.map(lambda c: run_cell(c, root), chosen)}


def envelopes(value: object) -> Iterator[dict[str, object]]:
    """Every finding-shaped dict (code, severity, fixes) anywhere in a JSON document."""
    if isinstance(value, dict):
        if {"code", "severity", "fixes"} <= value.keys():
            yield value
        for v in value.values():
            yield from envelopes(v)
    elif isinstance(value, list):
        for v in value:
            yield from envelopes(v)


def table(results: dict[str, Result]) -> str:
    """The committed table: per command and state, the exit codes (text, --json) and the first line."""
    by_key: dict[tuple[tuple[str, ...], str], dict[bool, Result]] = {}
    for r in results.values():
        by_key.setdefault((r.cell.command, r.cell.state.name), {})[r.cell.json] = r
    order = {s.name: i for i, s in enumerate(STATES)}
    lines = [
        "# The CLI matrix: every command in every bad state",
        "",
        "Regenerated by `python tests/real/cli/cli_matrix.py` (checked by tests/real/cli/test_cli_matrix.py:",
        "never a traceback, exit 0/1/2, under `--json` one valid envelope). Machine: "
        f"{platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}, no GPU. "
        "Paths under the run's directory read `<tmp>`.",
        "",
        "States: " + "; ".join(f"`{s.name}`: {s.what}" for s in STATES) + ".",
        "",
        "| command | state | exit | exit --json | first line |",
        "|---|---|---|---|---|",
    ]
    for (command, state), runs in sorted(by_key.items(), key=lambda kv: (kv[0][0], order[kv[0][1]])):
        text, js = runs.get(False), runs.get(True)
        first = (text or js).first_line().replace("|", "\\|") if (text or js) else ""
        codes = [str(r.returncode) if r is not None else "-" for r in (text, js)]
        lines.append(f"| `{' '.join(command) or 'jitguard'}` | {state} | {codes[0]} | {codes[1]} | {first} |")
    return "\n".join(lines) + "\n"


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="jitguard-matrix-") as root:
        results = run_matrix(Path(root))
    TABLE.write_text(table(results), encoding="utf-8")
    bad = [
        r.cell.id
        for r in results.values()
        if r.returncode not in (INTERRUPTED_CODES if r.cell.state.interrupt_after else (0, 1, 2))
        or "Traceback" in r.stdout + r.stderr
    ]
    print(f"{len(results)} runs; wrote {TABLE.relative_to(ROOT)}; {len(bad)} broke the contract: {bad}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT / "tests" / "lib"))
    raise SystemExit(main())
