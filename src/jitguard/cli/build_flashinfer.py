"""`jitguard build flashinfer-gdn`: prebuild FlashInfer's GDN prefill module ahead of serving.

For a Docker build step or CI, also on a host without a GPU: the arch comes from ``--arch`` (FlashInfer's
``FLASHINFER_CUDA_ARCH_LIST``), the module lands in FlashInfer's own cache under ``--workspace``
(``FLASHINFER_WORKSPACE_BASE``), exactly where the serving process will look for it. The build is the guarded
one (failure cache, pre-flight, module lock, supervised runner, GLIBCXX check) but the module is not loaded.

With ``--model PATH/config.json`` (or ``--variant NAME``) it builds only the GDN instances that model uses
(``gdn_variants.variant_plan``: its dtype and head layout; vLLM always passes beta, alpha and an initial state)
into a module of their own name, which the serving process finds (``gdn_variants.module_router``); ``--plan``
prints what would be compiled, in well under a second, on any host (no FlashInfer import, no compile).

A doomed environment fails in about a second, before FlashInfer is even imported: the pre-flight runs on the
facts alone. ``register(build_subparsers)`` is called by ``jitguard.cli.build``.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from jitguard.cli.build import add_share_arguments
from jitguard.cli.build_flashinfer_plan import installed_version, selection_from
from jitguard.config import Settings, format_bytes, parse_duration, parse_jobs, parse_memory_spec
from jitguard.errors import EXIT_FAILURE, EXIT_OK, BuildFailed, UsageError

if TYPE_CHECKING:
    from jitguard.cli.build_flashinfer_plan import Selection
    from jitguard.findings.model import Finding
    from jitguard.flashinfer_jit.flashinfer_build import BuiltModule
    from jitguard.supervise.build_options import BuildOptions

# The command's stages are imported where it runs them: `jitguard --help` imports every command module.

COMMAND = "build.flashinfer-gdn"
GDN_ARCH = "9.0a"  # the nvcc-era module is compiled for sm_90a only
_ARCH = re.compile(r"^\d+\.\d+a?$")


def register(build_subparsers: Any) -> None:
    parser = build_subparsers.add_parser(
        "flashinfer-gdn",
        help="prebuild FlashInfer's GDN prefill JIT module (no GPU needed)",
        description=(
            "Build FlashInfer's GDN prefill module (nvcc era, flashinfer-python 0.6.3-0.6.13) into "
            "FlashInfer's cache ahead of serving, memory-bounded and watched. With --model (or --variant) "
            "only the instances that model uses are compiled (e.g. 3 of 34 files for a bfloat16 Qwen3.5), "
            "into a module named after them that the serving process uses; without, FlashInfer's full module "
            "(every instance). Fails within seconds, before any compile, when the environment cannot produce "
            "a working module (e.g. no libcuda to link)."
        ),
        epilog=(
            "Examples: jitguard build flashinfer-gdn --model /models/Qwen3.5-27B/config.json --plan; "
            "jitguard build flashinfer-gdn --model /models/Qwen3.5-27B --workspace /opt/flashinfer. "
            "Exit codes: 0 built, up to date or planned, 1 a blocking finding or failed build, 2 usage error."
        ),
    )
    parser.add_argument(
        "--model",
        default=None,
        metavar="PATH",
        help="the model's config.json (or its directory): build only the GDN instances it uses",
    )
    parser.add_argument(
        "--dtype",
        default=None,
        choices=("float16", "bfloat16"),
        help="with --model: the serving dtype, when it differs from the config's (vLLM's --dtype)",
    )
    parser.add_argument(
        "--checkpointing",
        action="store_true",
        help="with --model, FlashInfer >= 0.6.8: also the instance that writes state checkpoints",
    )
    parser.add_argument(
        "--variant",
        action="append",
        default=[],
        metavar="NAME",
        help="build this instance, as FlashInfer names its file, e.g. bf16_g1b1a1i1 (repeatable)",
    )
    parser.add_argument(
        "--plan",
        action="store_true",
        help="print the instances and files it would compile, and where; compile nothing (any host)",
    )
    parser.add_argument(
        "--flashinfer-version",
        default=None,
        metavar="VERSION",
        help="with --plan: plan for this flashinfer-python version instead of the installed one",
    )
    parser.add_argument("--arch", default=None, help="target arch as FlashInfer spells it (default 9.0a)")
    parser.add_argument(
        "--jobs", default="auto", help="parallel compile jobs: auto (from the memory budget) or N"
    )
    parser.add_argument("--memory-budget", default=None, help="memory the build may use: 32G or 75%%")
    parser.add_argument(
        "--workspace", default=None, help="FlashInfer workspace base (FLASHINFER_WORKSPACE_BASE)"
    )
    parser.add_argument("--timeout", default=None, help="overall build time limit: 3600, 90m, 2h")

    add_share_arguments(parser)
    parser.add_argument("--json", action="store_true", help="print the versioned JSON envelope")
    parser.set_defaults(execute=execute)


def execute(args: argparse.Namespace) -> int:
    env = _environment(args)
    started = time.monotonic()
    if args.flashinfer_version and not args.plan:
        raise UsageError("--flashinfer-version plans for another FlashInfer; it needs --plan")
    if args.plan:
        from jitguard.cli.build_flashinfer_plan import report_plan

        return report_plan(args, env, started)
    settings = Settings.from_env(env)  # this command's, once, in the environment the build runs in
    options = _options(args, settings)
    selection = selection_from(args)
    version = installed_version()
    if selection.partial and version is not None:
        selection.plan(
            version
        )  # a bad --variant or a version without variants: a usage error, before any work
    try:
        built, skipped = _build(env, settings, options, selection, args.publish)
    except _Blocked as blocked:
        headline = f"Build of {blocked.module} not started: {blocked.detail}"
        return _report_failure(args, blocked.module, blocked.findings, None, headline, started)
    except ImportError as exc:
        from jitguard.findings.catalog import make

        finding = make(
            "flashinfer-import-broken", backend="flashinfer", evidence=[f"{type(exc).__name__}: {exc}"]
        )
        headline = "Build of gdn_prefill not started: cannot import FlashInfer"
        return _report_failure(args, "gdn_prefill", [finding], None, headline, started)
    except Exception as exc:
        if not isinstance(exc, BuildFailed):
            raise
        return _report_failure(args, exc.module, list(exc.findings), exc.log_path, exc.headline, started)
    return _report_success(args, built, skipped, started, selection)


class _Blocked(Exception):
    def __init__(self, module: str, findings: list[Finding], detail: str) -> None:
        super().__init__(detail)
        self.module, self.findings, self.detail = module, findings, detail


def _environment(args: argparse.Namespace) -> dict[str, str]:
    env = dict(os.environ)
    arch = args.arch or env.get("FLASHINFER_CUDA_ARCH_LIST") or GDN_ARCH
    if not _ARCH.match(arch):
        raise UsageError(
            f"--arch {arch!r} is not an arch as FlashInfer spells it; use {GDN_ARCH} (Hopper, sm_90a)"
        )
    if arch != GDN_ARCH:
        raise UsageError(
            f"--arch {arch}: FlashInfer's nvcc GDN prefill module runs only on sm_90a (Hopper); "
            f"use --arch {GDN_ARCH}"
        )
    env["FLASHINFER_CUDA_ARCH_LIST"] = arch
    if args.workspace:
        workspace = Path(args.workspace).expanduser().resolve()
        if workspace.exists() and not workspace.is_dir():
            raise UsageError(f"--workspace {args.workspace}: not a directory")
        env["FLASHINFER_WORKSPACE_BASE"] = str(workspace)
    if args.share:
        env["JITGUARD_SHARE"] = args.share
    return env


def _options(args: argparse.Namespace, settings: Settings) -> BuildOptions:
    from jitguard.supervise.build_options import BuildOptions

    jobs = parse_jobs(args.jobs, name="--jobs")
    budget = (
        parse_memory_spec(args.memory_budget, name="--memory-budget")
        if args.memory_budget
        else settings.memory_budget
    )
    timeout = parse_duration(args.timeout, name="--timeout") if args.timeout else settings.build_timeout
    if timeout <= 0:
        raise UsageError(f"--timeout {args.timeout!r}: expected a positive duration such as 90m")
    return BuildOptions.from_settings(
        settings, jobs=jobs, memory_budget=budget, timeout=timeout, backend="flashinfer"
    )


def _build(
    env: dict[str, str],
    settings: Settings,
    options: BuildOptions,
    selection: Selection,
    publish: str | None = None,
) -> tuple[BuiltModule | None, str | None]:
    """(the built module, None) or (None, why there is nothing to build)."""
    from jitguard.facts.flashinfer import ERA_CUTEDSL, ERA_NVCC
    from jitguard.findings.catalog import make
    from jitguard.flashinfer_jit.flashinfer_build import build_spec, check_before_build, facts_for
    from jitguard.state.failure_cache import FailureCache, ttl_from_env

    facts = facts_for(env)
    fi = facts.flashinfer
    if not fi.installed:
        raise _Blocked(
            "gdn_prefill", [make("flashinfer-missing", backend="flashinfer")], "flashinfer is missing"
        )
    if fi.era == ERA_CUTEDSL:
        return None, (
            f"flashinfer-python {fi.version} builds GDN prefill with CuTeDSL inside each process at first "
            "call; there is no nvcc module to prebuild"
        )
    if fi.era != ERA_NVCC or not fi.gdn_module:
        raise _Blocked(
            "gdn_prefill",
            [make("flashinfer-too-old", backend="flashinfer", version=fi.version)],
            "this FlashInfer has no GDN prefill module",
        )
    plan = selection.plan(fi.version)[0] if selection.partial else None
    module = plan.module if plan is not None else fi.gdn_module
    if fi.prebuilt_gdn is not None and fi.prebuilt_source != "cached_ops":
        return (
            None,
            f"{fi.gdn_module} is prebuilt by {fi.prebuilt_source} ({fi.prebuilt_gdn}); nothing to compile",
        )
    if plan is not None and fi.prebuilt_gdn is not None:
        return None, (
            f"FlashInfer's full module {fi.gdn_module} is already built ({fi.prebuilt_gdn}) and serves every "
            "instance; jitguard uses it"
        )

    failures = FailureCache(settings.cache_dir, ttl=ttl_from_env(env))
    if not _library_exists(fi.jit_dir, module) and not settings.share_url:
        # Nothing built yet: a doomed environment fails here, before the seconds-long flashinfer import
        # (with a store the module may still be fetched: build_spec checks after trying that).
        check_before_build(module, facts, failures)

    os.environ.update(
        {k: env[k] for k in ("FLASHINFER_CUDA_ARCH_LIST", "FLASHINFER_WORKSPACE_BASE") if k in env}
    )
    try:
        if plan is not None:
            from jitguard.gdn_variants.partial_module import build_variant_module

            return build_variant_module(plan, load=False, options=options, env=env), None
        spec = _gdn_spec(module)
        return build_spec(spec, load=None, options=options, env=env, publish=publish), None
    except RuntimeError:
        # With a store, pre-flight waits until the fetch was tried; but FlashInfer cannot even write the
        # module's build file where it finds no nvcc and a CPU torch ("Could not determine CUDA version"):
        # pre-flight's verdict (nvcc-missing, with its fixes) says why, as it does without a store.
        check_before_build(module, facts, failures)
        raise


def _library_exists(jit_dir: Path | None, module: str) -> bool:
    return jit_dir is not None and (jit_dir / module / f"{module}.so").is_file()


def _gdn_spec(module: str) -> Any:
    from flashinfer.jit import gdn  # the generator writes the .cu sources into FlashInfer's workspace

    generate = getattr(gdn, f"gen_{module}_module", None)
    if generate is None:
        raise UsageError(
            f"this FlashInfer has no flashinfer.jit.gdn.gen_{module}_module to generate {module}; "
            "jitguard prebuilds the GDN module of flashinfer-python 0.6.3-0.6.13"
        )
    return generate()


def _report_success(
    args: argparse.Namespace,
    built: BuiltModule | None,
    skipped: str | None,
    started: float,
    selection: Selection,
) -> int:
    elapsed = time.monotonic() - started
    plan = selection.plan(installed_version())[0] if selection.partial and built is not None else None
    if args.json:
        from jitguard.cli.envelope import dumps

        payload: dict[str, Any] = {"ok": True, "elapsed_s": round(elapsed, 3)}
        if built is None:
            payload.update({"status": "nothing-to-build", "reason": skipped})
        else:
            result = built.result
            payload.update(
                {
                    "status": built.status,
                    "module": built.module,
                    "so_path": str(built.so_path),
                    "log_path": str(built.log_path) if built.log_path else None,
                    "build": result.to_json() if result else None,
                    "waited_s": round(built.waited_s, 3),
                    "findings": [f.to_json() for f in built.notes],
                    "shared": [o.to_json() for o in built.shared],
                }
            )
            if plan is not None:
                payload["plan"] = plan.to_json()
        print(dumps(COMMAND, payload))
        return _publish_status(built) if built else EXIT_OK
    from jitguard.cli.report import console, render_findings

    out = console()
    if built is None:
        out.print(f"Nothing to build: {skipped}.")
        if args.publish:
            sys.stderr.write("jitguard: nothing was published: no module was built here\n")
        return EXIT_OK
    if built.notes:
        render_findings(out, built.notes)
    if plan is not None:
        out.print(
            f"{built.module} holds only {', '.join(v.suffix for v in plan.variants)} ({plan.tu_count} of "
            f"FlashInfer's {plan.family.full_tu_count} files); a serving process uses it for those calls."
        )
    for outcome in built.shared:
        if outcome.action in ("failed", "refused"):
            out.print(f"[yellow]artifact store[/]: {outcome.detail}")
    if built.status == "fetched":
        fetched = next(o for o in built.shared if o.action == "fetched")
        out.print(
            f"Fetched {built.module} from {fetched.to_json()['url']} ({fetched.bytes} bytes in "
            f"{fetched.seconds:.1f} s, sha256 verified; {fetched.detail}): {built.so_path}"
        )
    elif built.status == "up-to-date":
        out.print(f"{built.module} is up to date: {built.so_path}")
    else:
        result = built.result
        assert result is not None
        peak = format_bytes(result.peak_rss_bytes) if result.peak_rss_bytes else "unknown"
        out.print(
            f"Built {built.module} in {result.wall_s:.0f} s with {result.jobs} jobs "
            f"({result.attempts} attempt(s), peak memory {peak}): {built.so_path}\nFull log: {built.log_path}"
        )
        if result.compiler_cache is not None:
            out.print(f"Compiler cache: {result.compiler_cache.describe()}")
    for outcome in built.shared:
        if outcome.action == "published":
            out.print(f"Published {built.module} to {outcome.to_json()['url']} ({outcome.bytes} bytes)")
    return _publish_status(built)


def _publish_status(built: BuiltModule) -> int:
    """A publish that was asked for and failed fails the command (the module itself is built and kept)."""
    failed = [o for o in built.shared if o.operation == "publish" and o.action != "published"]
    if failed:
        sys.stderr.write(f"jitguard: {built.module} is built but was not published: {failed[0].detail}\n")
        return EXIT_FAILURE
    return EXIT_OK


def _report_failure(
    args: argparse.Namespace,
    module: str,
    findings: list[Finding],
    log_path: str | None,
    headline: str,
    started: float,
) -> int:
    """``headline``: one line that says what happened ("Build of X not started: pre-flight found ...")."""
    if args.json:
        from jitguard.cli.envelope import dumps

        payload = {
            "ok": False,
            "status": "failed",
            "module": module,
            "detail": headline,
            "log_path": log_path,
            "elapsed_s": round(time.monotonic() - started, 3),
            "findings": [f.to_json() for f in findings],
        }
        print(dumps(COMMAND, payload))
        return EXIT_FAILURE
    from rich.markup import escape

    from jitguard.cli.report import console, render_findings

    err = console(sys.stderr)
    err.print(f"[bold red]{escape(headline)}[/]")
    render_findings(err, findings)
    if log_path:
        err.print(f"Full log: {log_path}")
    return EXIT_FAILURE
