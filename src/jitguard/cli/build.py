"""`jitguard build TARGET`: supervised builds. This module owns the `build` parser and its `ninja` target.

    jitguard build ninja PATH [--jobs auto|N] [--memory-budget 32G|75%] [--job-memory 6G]
                              [--timeout 1h] [--stall-timeout 10m] [--log FILE] [--module NAME]
                              [--share URL] [--publish URL] [--artifact FILE]... [--json]

runs any ninja project through jitguard's runner: parallelism from the memory budget, host-wide compile slots,
live progress, timeout and stall watchdog, OOM retry at fewer jobs, the full log kept; with an artifact
store, fetched instead of built when another host published it (``--share``) and published after
(``--publish``; docs/fleet.md). Other targets live in
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

from jitguard.cli.parsing import needs_action, store_url
from jitguard.config import (
    Settings,
    default_cache_dir,
    format_bytes,
    parse_duration,
    parse_jobs,
    parse_memory_spec,
    parse_size,
)
from jitguard.errors import EXIT_FAILURE, EXIT_OK, BuildFailed, UsageError

# The command's stages are imported where it runs them: `jitguard --help` imports every command module.

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
    parser.set_defaults(
        execute=needs_action(
            parser, "jitguard build needs a target, e.g. `jitguard build ninja path/to/build.ninja`"
        )
    )


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
    add_share_arguments(parser)
    parser.add_argument(
        "--artifact",
        action="append",
        default=None,
        metavar="FILE",
        help="a file to fetch and publish, relative to the build directory (repeatable; default: the "
        "project's final targets)",
    )
    parser.add_argument("--json", action="store_true", help="print the versioned JSON envelope")
    parser.set_defaults(execute=execute)


def add_share_arguments(parser: argparse.ArgumentParser) -> None:
    """``--share URL`` and ``--publish URL``: the artifact store (docs/fleet.md)."""
    parser.add_argument(
        "--share",
        default=None,
        type=store_url("--share"),
        metavar="URL",
        help="fetch from this artifact store instead of building when it has the build (default: JITGUARD_SHARE)",
    )
    parser.add_argument(
        "--publish",
        default=None,
        type=store_url("--publish"),
        metavar="URL",
        help="publish what was built to this artifact store (file://, s3://, gs://)",
    )


def _ninja_file(path: str) -> Path:
    candidate = Path(path).expanduser()
    if candidate.is_dir():
        candidate = candidate / "build.ninja"
    if candidate.exists() and not candidate.is_file():
        raise UsageError(
            f"{path}: not a regular file (a FIFO, a device?). Give a build.ninja or its directory."
        )
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


def _options(args: argparse.Namespace, settings: Settings) -> Any:
    from jitguard.supervise.build_options import BuildOptions

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
    from jitguard.supervise.runner import run_ninja

    ninja_file = _ninja_file(args.path)
    settings = Settings.from_env()  # this command's, once
    options = _options(args, settings)
    module = args.module or ninja_file.parent.name or "build"
    log_path = _log_path(args.log)
    if options.progress in ("auto", "log"):
        _show_progress_and_waits()
    started = time.monotonic()
    share_url = args.share or settings.share_url
    shared = _ninja_share(args, ninja_file, module, share_url, settings)
    outcomes = []
    status = None
    if shared is not None:
        if shared.is_current():
            status = "up-to-date"
        elif share_url and not all(p.is_file() for p in shared.paths):
            outcomes.append(shared.fetch(share_url))
            status = "fetched" if outcomes[-1].action == "fetched" else None
    try:
        if status is None:
            result = run_ninja(
                ninja_file.parent, ninja_file, module=module, options=options, log_path=log_path
            )
            status = "built" if result.attempts else "up-to-date"
        else:
            result = _fetched_result(module, log_path, options, outcomes, started)
    except BuildFailed as exc:
        return _report_failure(args, exc, started)
    except KeyboardInterrupt as exc:
        sys.stderr.write(f"jitguard: {exc or 'interrupted'}\n")
        return 130
    if args.publish and shared is not None:
        outcomes.append(shared.publish(args.publish, {"command": "jitguard build ninja"}))
    elif args.publish:
        from jitguard.fleet.module_share import ShareOutcome

        outcomes.append(
            ShareOutcome("publish", "failed", args.publish, "the project's artifacts are unknown")
        )
    code = EXIT_OK
    for outcome in outcomes:
        if outcome.operation == "publish" and outcome.action != "published":
            sys.stderr.write(f"jitguard: {module} is built but was not published: {outcome.detail}\n")
            code = EXIT_FAILURE
    if args.json:
        from jitguard.cli.envelope import dumps

        payload = {
            "ok": True,
            "status": status,
            **result.to_json(),
            "shared": [o.to_json() for o in outcomes],
        }
        print(dumps(COMMAND, payload))
        return code
    for outcome in outcomes:
        print(f"{module}: artifact store: {outcome.operation} {outcome.action} {outcome.detail}".rstrip())
    if status == "fetched":
        print(f"{module}: fetched from the artifact store, nothing compiled (log: {result.log_path})")
    elif result.attempts == 0:
        print(f"{module}: up to date (log: {result.log_path})")
    else:
        print(
            f"{module}: built in {result.wall_s:.1f} s with {result.jobs} job{'s' if result.jobs != 1 else ''} "
            f"({result.attempts} attempt{'s' if result.attempts != 1 else ''}), peak memory "
            f"{format_bytes(result.peak_rss_bytes)}; log: {result.log_path}"
        )
        if result.compiler_cache is not None:
            print(f"{module}: compiler cache: {result.compiler_cache.describe()}")
    return code


def _ninja_share(
    args: argparse.Namespace, ninja_file: Path, module: str, share_url: str | None, settings: Settings
) -> Any:
    """The project's key in the artifact stores, when one is named; None (with one warning) when it cannot be
    computed: the build then runs as without a store."""
    fetched_before = any(ninja_file.parent.glob("*.jitguard-fetched.json"))
    if not (share_url or args.publish or fetched_before):
        return None
    import shutil
    import subprocess

    from jitguard.facts import collect
    from jitguard.facts.build_identity import of_facts
    from jitguard.fleet.module_share import ninja_share

    try:
        return ninja_share(
            shutil.which("ninja") or "ninja",
            ninja_file.parent,
            ninja_file,
            module=module,
            timeout=settings.share_timeout,
            build_fingerprint=of_facts(collect(cache_dir=settings.cache_dir)),
            artifacts=args.artifact or (),
        )
    except (RuntimeError, OSError, ValueError, subprocess.SubprocessError) as exc:
        sys.stderr.write(f"jitguard: the artifact store is not used for {module}: {exc}\n")
        return None


def _fetched_result(
    module: str, log_path: Path | None, options: Any, outcomes: list[Any], started: float
) -> Any:
    """A BuildResult for a project that ran no compile: fetched, or fetched earlier and unchanged."""
    from jitguard.supervise.build_options import BuildResult
    from jitguard.supervise.runner import default_log_path

    path = log_path or default_log_path(Path(options.cache_dir or default_cache_dir()), module)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a", encoding="utf-8") as log:
        for outcome in outcomes or ():
            log.write(
                f"jitguard: artifact store {outcome.to_json()['url']}: {outcome.action} {outcome.detail}\n"
            )
        if not outcomes:
            log.write("jitguard: the artifacts in place were fetched for this very build: nothing to do\n")
    return BuildResult(module, path, 0, 0, time.monotonic() - started, 0)


def _report_failure(args: argparse.Namespace, exc: Any, started: float) -> int:
    detail = exc.headline
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
