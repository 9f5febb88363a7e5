"""`jitguard build TARGET`: supervised builds. This module owns the `build` parser and its `ninja` target.

    jitguard build ninja PATH [--jobs auto|N] [--memory-budget 32G|75%] [--job-memory 6G]
                              [--timeout 1h] [--stall-timeout 10m] [--log FILE] [--module NAME] [--json]

runs any ninja project through jitguard's runner: parallelism from the memory budget, host-wide compile slots,
live progress, timeout and stall watchdog, OOM retry at fewer jobs, the full log kept. Other targets live in
their own modules and register themselves on the ``build`` sub-parsers (``jitguard.cli.build_flashinfer``
adds ``flashinfer-gdn``).
"""

from __future__ import annotations

import argparse
import importlib
import sys
import time
from pathlib import Path
from typing import Any

from jitguard.errors import EXIT_FAILURE, EXIT_OK, UsageError

COMMAND = "build.ninja"
# Target modules that add their own sub-command to `jitguard build`; a missing one is simply not offered.
_TARGET_MODULES = ("jitguard.cli.build_flashinfer",)


def configure(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "build",
        help="run a supervised, memory-bounded build (a ninja project, or FlashInfer's GDN module)",
        description=(
            "Build JIT modules ahead of time or any ninja project, memory-bounded across the host, watched "
            "(timeout, stall watchdog), retried with fewer jobs after an out-of-memory kill, with the full log "
            "kept. Settings default to JITGUARD_MEMORY_BUDGET, JITGUARD_JOB_MEMORY, JITGUARD_BUILD_TIMEOUT, "
            "JITGUARD_STALL_TIMEOUT and JITGUARD_CACHE_DIR."
        ),
        epilog="Exit codes: 0 built or up to date, 1 failed build or blocking finding, 2 usage error.",
    )
    targets = parser.add_subparsers(dest="build_target", metavar="TARGET", parser_class=type(parser))
    _configure_ninja(targets)
    for name in _TARGET_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name != name:
                raise
            continue
        module.register(targets)
    parser.set_defaults(execute=_usage(parser))


def _usage(parser: argparse.ArgumentParser) -> Any:
    def show(_args: argparse.Namespace) -> int:
        parser.print_help(sys.stderr)
        raise UsageError("jitguard build needs a target, e.g. `jitguard build ninja path/to/build.ninja`")

    return show


def _configure_ninja(targets: Any) -> None:
    parser = targets.add_parser(
        "ninja",
        help="build a ninja project under supervision",
        description=(
            "Run the ninja project PATH (a build.ninja file, or a directory holding one) under jitguard's "
            "supervision. ninja runs in the directory of the file. Every compile command holds one of the "
            "host's compile slots while it runs, so several builds at once keep to one memory budget."
        ),
        epilog="Exit codes: 0 built or up to date, 1 failed build, 2 usage error.",
    )
    parser.add_argument("path", metavar="PATH", help="build.ninja, or a directory containing build.ninja")
    parser.add_argument("--jobs", default="auto", help="parallel jobs: auto (from the memory budget) or N")
    parser.add_argument(
        "--memory-budget", default=None, help="memory the build may use: 32G or 75%% of available"
    )
    parser.add_argument("--job-memory", default=None, help="memory one compile job needs, e.g. 6G")
    parser.add_argument("--timeout", default=None, help="overall time limit: 3600, 90m, 2h (default 1h)")
    parser.add_argument(
        "--stall-timeout",
        default=None,
        help="stop when nothing is printed and no CPU used this long (default 10m)",
    )
    parser.add_argument(
        "--log", default=None, help="write the full build log here (default: jitguard's cache)"
    )
    parser.add_argument(
        "--module", default=None, help="name used for logs and learned memory (default: dir name)"
    )
    parser.add_argument(
        "--progress", default="auto", choices=("auto", "bar", "log", "none"), help="how to show progress"
    )
    parser.add_argument("--json", action="store_true", help="print the versioned JSON envelope")
    parser.set_defaults(execute=execute)


def _ninja_file(path: str) -> Path:
    candidate = Path(path).expanduser()
    if candidate.is_dir():
        candidate = candidate / "build.ninja"
    if not candidate.is_file():
        raise UsageError(f"{path}: no such ninja file. Give a build.ninja or a directory that contains one.")
    return candidate.resolve()


def _log_path(text: str | None) -> Path | None:
    """``--log``: a regular file jitguard can append to (created if missing), never a directory, a device or a
    file of /proc or /sys (writing a log line into /proc/sysrq-trigger would be an action)."""
    if not text:
        return None
    path = Path(text).expanduser().resolve()
    example = "e.g. --log /tmp/build.log"
    if path.is_dir():
        raise UsageError(
            f"--log {text}: is a directory; give the path of a file, e.g. --log {path / 'build.log'}"
        )
    if any(path.is_relative_to(p) for p in (Path("/proc"), Path("/sys"))):
        raise UsageError(f"--log {text}: is not a place for a log ({path} is a kernel file); {example}")
    if path.exists() and not path.is_file():
        raise UsageError(f"--log {text}: is not a regular file; give the path of a file, {example}")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "ab"):
            pass
    except OSError as exc:
        raise UsageError(f"--log {text}: cannot write to it ({exc.strerror or exc}); {example}") from None
    return path


def _options(args: argparse.Namespace) -> Any:
    from jitguard.config import Settings, parse_duration, parse_jobs, parse_memory_spec, parse_size
    from jitguard.supervise.runner import BuildOptions

    settings = Settings.from_env()
    overrides: dict[str, Any] = {"jobs": parse_jobs(args.jobs, name="--jobs"), "progress": args.progress}
    if args.memory_budget:
        overrides["memory_budget"] = parse_memory_spec(args.memory_budget, name="--memory-budget")
    if args.job_memory:
        overrides["job_memory"] = parse_size(args.job_memory, name="--job-memory")
        if overrides["job_memory"] <= 0:
            raise UsageError(f"--job-memory {args.job_memory!r}: expected a positive size such as 6G")
    for flag, key in (("timeout", "timeout"), ("stall_timeout", "stall_timeout")):
        raw = getattr(args, flag)
        if raw:
            value = parse_duration(raw, name=f"--{flag.replace('_', '-')}")
            if value <= 0:
                raise UsageError(
                    f"--{flag.replace('_', '-')} {raw!r}: expected a positive duration such as 10m"
                )
            overrides[key] = value
    return BuildOptions.from_settings(settings, **overrides)


def _show_progress_and_waits() -> None:
    """Progress lines and lock waits go through logging; the CLI is the one place that decides where they
    appear: stderr, once per process (``main`` may run many times in one process)."""
    import logging

    logger = logging.getLogger("jitguard")
    if not any(getattr(h, "_jitguard_cli", False) for h in logger.handlers):
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(message)s"))
        handler._jitguard_cli = True  # type: ignore[attr-defined]
        logger.addHandler(handler)
    logger.setLevel(logging.INFO)


def execute(args: argparse.Namespace) -> int:
    from jitguard.errors import BuildFailed
    from jitguard.supervise.runner import run_ninja

    ninja_file = _ninja_file(args.path)
    options = _options(args)
    module = args.module or ninja_file.parent.name or "build"
    log_path = _log_path(args.log)
    if options.progress in ("auto", "log"):
        _show_progress_and_waits()
    started = time.monotonic()
    try:
        result = run_ninja(ninja_file.parent, ninja_file, module=module, options=options, log_path=log_path)
    except BuildFailed as exc:
        return _report_failure(args, exc, started)
    except KeyboardInterrupt as exc:
        sys.stderr.write(f"jitguard: {exc or 'interrupted'}\n")
        return 130
    if args.json:
        from jitguard.cli.envelope import dumps

        print(
            dumps(
                COMMAND,
                {"ok": True, "status": "built" if result.attempts else "up-to-date", **result.to_json()},
            )
        )
    elif result.attempts == 0:
        print(f"{module}: up to date (log: {result.log_path})")
    else:
        from jitguard.config import format_bytes

        print(
            f"{module}: built in {result.wall_s:.1f} s with {result.jobs} job{'s' if result.jobs != 1 else ''} "
            f"({result.attempts} attempt{'s' if result.attempts != 1 else ''}), peak memory "
            f"{format_bytes(result.peak_rss_bytes)}; log: {result.log_path}"
        )
    return EXIT_OK


def _report_failure(args: argparse.Namespace, exc: Any, started: float) -> int:
    detail = str(exc).splitlines()[0]
    if args.json:
        from jitguard.cli.envelope import dumps

        payload = {
            "ok": False,
            "status": "failed",
            "module": exc.module,
            "detail": detail,
            "log_path": exc.log_path,
            "elapsed_s": round(time.monotonic() - started, 3),
            "findings": [f.to_json() for f in exc.findings],
        }
        print(dumps(COMMAND, payload))
        return EXIT_FAILURE
    from rich.markup import escape

    from jitguard.cli.report import console, render_findings

    err = console(sys.stderr)
    err.print(f"[bold red]{escape(detail)}[/]")
    render_findings(err, exc.findings)
    if exc.log_path:
        err.print(f"Full log: {exc.log_path}")
    return EXIT_FAILURE
