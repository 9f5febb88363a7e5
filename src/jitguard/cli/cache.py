"""`jitguard cache list|clear`: what jitguard remembers (build outcomes, memory per job, the CuTeDSL kernels it
keeps: ``cutedsl.kernel_cache``); forgetting it.

The failure cache makes a doomed build cost nothing at the next start; `clear` is how a user says "try again
anyway" (normally unnecessary: fixing the cause changes the environment fingerprint by itself). A cache dir
jitguard does not trust (another user's, or writable by others) is not listed, and `list` says why; `clear`
removes whatever is in the way, and says what stayed when the directory cannot be changed.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import TYPE_CHECKING, Any

from jitguard.cli.parsing import needs_action
from jitguard.config import default_cache_dir, format_bytes, format_duration
from jitguard.errors import EXIT_OK, DirectoryInTheWay, UsageError

if TYPE_CHECKING:
    from jitguard.state.module_names import Selection

# The command's stages are imported where it runs them: `jitguard --help` imports every command module.

_MODULE_HELP = (
    "the records of module NAME as `cache list` names them (e.g. gdn_prefill_sm90, sampling); a name of "
    "FlashInfer GDN prefill (the op's gdn-prefill/flashinfer, or a gdn_prefill* module) selects all of them"
)


def configure(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "cache",
        help="list or clear jitguard's cached build outcomes",
        description=(
            "jitguard remembers the outcome of each JIT module build per environment fingerprint (so a "
            "doomed build is not retried until something changes), the memory one compile job needed, and the "
            "CuTeDSL kernels it compiled once for every later process (clear without --module forgets them). "
            "The directory is JITGUARD_CACHE_DIR (default: ~/.cache/jitguard); JITGUARD_FAILURE_TTL sets how "
            "long an outcome counts (default 168h)."
        ),
    )
    actions = parser.add_subparsers(dest="cache_action", metavar="ACTION", parser_class=type(parser))
    listing = actions.add_parser("list", help="show cached outcomes and learned memory per compile job")
    listing.add_argument("--json", action="store_true", help="print the versioned JSON envelope")
    listing.add_argument("--all", action="store_true", help="include expired outcomes")
    listing.add_argument("--module", default=None, metavar="NAME", help=f"list only {_MODULE_HELP}")
    listing.set_defaults(execute=execute)
    clearing = actions.add_parser("clear", help="forget cached outcomes (and learned memory)")
    clearing.add_argument("--module", default=None, metavar="NAME", help=f"forget only {_MODULE_HELP}")
    clearing.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    clearing.add_argument("--json", action="store_true", help="print the versioned JSON envelope")
    clearing.set_defaults(execute=execute)
    parser.set_defaults(execute=needs_action(parser, "jitguard cache needs an action: list or clear"))


def execute(args: argparse.Namespace) -> int:
    from jitguard.cutedsl.kernel_cache import KernelCache
    from jitguard.state.failure_cache import FailureCache, ttl_from_env
    from jitguard.state.job_memory import JobMemoryStore

    cache_dir = default_cache_dir()
    _refuse_a_file_in_the_way(cache_dir)
    failures = FailureCache(cache_dir, ttl=ttl_from_env())
    memory = JobMemoryStore(cache_dir)
    kernels = KernelCache(cache_dir)
    if args.cache_action == "list":
        return _list(args, failures, memory, kernels)
    return _clear(args, failures, memory, kernels)


def _selection(args: argparse.Namespace) -> Selection | None:
    from jitguard.state.module_names import select

    return select(args.module) if args.module else None


def _list(args: argparse.Namespace, failures: Any, memory: Any, kernels: Any) -> int:
    _say_if_untrusted(failures.cache_dir)
    now = time.time()
    selection = _selection(args)
    records = [
        r
        for r in failures.entries(include_expired=args.all, now=now)
        if selection is None or selection.holds(r.module)
    ]
    learned = [m for m in memory.all() if selection is None or selection.holds(m.module)]
    kept = kernels.entries() if selection is None else []  # kernels belong to no module
    here = _this_fingerprint() if records else None
    if args.json:
        from jitguard.cli.envelope import dumps

        payload = {
            "cache_dir": str(failures.cache_dir),
            "ttl_s": failures.ttl,
            "module": args.module,
            "selected": _selected_json(selection),
            "fingerprint": here,
            "entries": [
                {
                    **r.to_json(),
                    "age_s": round(r.age(now), 1),
                    "expired": r.age(now) > failures.ttl,
                    "this_environment": None if here is None else r.fingerprint == here,
                }
                for r in records
            ],
            "job_memory": [
                {"module": m.module, "estimate_bytes": m.estimate, "observations": list(m.observations)}
                for m in learned
            ],
            "kernels": [
                {
                    "name": k["name"],
                    "digest": k["key"],
                    "format": k["format"],
                    "bytes": k["size"],
                    "age_s": round(max(0.0, now - float(k["created"])), 1),
                }
                for k in kept
            ],
        }
        print(dumps("cache", payload))
        return EXIT_OK

    from rich.markup import escape
    from rich.table import Table

    from jitguard.cli.report import console

    out = console()
    which = f" of module {args.module}" if args.module else ""
    if not records:
        out.print(f"No cached build outcomes{escape(which)} in {escape(str(failures.root))}.")
    else:
        table = Table(title=f"Build outcomes ({escape(str(failures.root))})", title_justify="left")
        for column in ("module", "outcome", "codes", "age", "fingerprint", "here", "log"):
            table.add_column(column)
        for r in records:
            age = format_duration(r.age(now)) + (" (expired)" if r.age(now) > failures.ttl else "")
            table.add_row(
                escape(r.module),
                "[red]failure[/]" if r.failed else "[green]success[/]",
                escape(", ".join(r.codes)) or "-",
                age,
                escape(r.fingerprint),
                "?" if here is None else ("yes" if r.fingerprint == here else "no"),
                escape(r.log_path or "-"),
            )
        out.print(table)
        out.print(_fingerprints_line(here))
        if any(r.failed for r in records):
            out.print(
                "A cached failure is not retried until the environment changes or it expires; to retry now:"
            )
            out.print(f"  jitguard cache clear --module {escape(args.module or '<module>')} --yes")
    if learned:
        out.print("Learned memory per compile job:")
        for m in learned:
            out.print(
                f"  {escape(m.module)}: {format_bytes(m.estimate)} ({len(m.observations)} observed builds)"
            )
    if kept:
        out.print(f"CuTeDSL kernels kept for later processes ({escape(str(kernels.root))}):")
        for k in kept:
            age = format_duration(max(0.0, now - float(k["created"])))
            out.print(f"  {escape(k['name'])}: {format_bytes(k['size'])}, compiled {age} ago")
    if selection is not None and selection.note():
        out.print(escape(f"({selection.note()}.)"))
    return EXIT_OK


def _clear(args: argparse.Namespace, failures: Any, memory: Any, kernels: Any) -> int:
    selection = _selection(args)
    what = f"module {args.module}" if args.module else "every module"
    if not args.yes:
        if not sys.stdin.isatty():
            raise UsageError(
                f"jitguard cache clear would forget the cached outcomes of {what} in {failures.cache_dir}; "
                "pass --yes to confirm (no terminal to ask on)"
            )
        extra = " and the kept CuTeDSL kernels" if selection is None else ""
        sys.stderr.write(f"Forget the cached build outcomes of {what}{extra} in {failures.cache_dir}? [y/N] ")
        sys.stderr.flush()
        if sys.stdin.readline().strip().lower() not in ("y", "yes"):
            sys.stderr.write("Nothing removed.\n")
            return EXIT_OK
    by_module: dict[str, int] | None = None
    learned: list[str] | None = None
    kernel_files = 0
    if selection is None:
        outcomes, learned_count = failures.clear(), memory.clear()
        kernel_files, stayed = kernels.clear()
        for path, why in stayed:
            sys.stderr.write(f"jitguard: could not remove {path}: {why}\n")
    else:
        by_module = failures.forget(selection.names, prefixes=selection.prefixes)
        learned = [m.module for m in memory.all() if selection.holds(m.module)]
        outcomes, learned_count = sum(by_module.values()), sum(memory.clear(m) for m in learned)
    if args.json:
        from jitguard.cli.envelope import dumps

        payload = {
            "cache_dir": str(failures.cache_dir),
            "module": args.module,
            "selected": _selected_json(selection),
            "removed_outcomes": outcomes,
            "removed_job_memory": learned_count,
            "removed_by_module": by_module,
            "removed_job_memory_modules": learned,
            "removed_kernel_files": kernel_files,
        }
        print(dumps("cache", payload))
        return EXIT_OK
    head = f"Removed {outcomes} cached outcome(s) and {learned_count} learned memory record(s) for {what}"
    if selection is None:
        print(head + f", and {kernel_files} kept CuTeDSL kernel file(s).")
    else:
        print(_matched_text(head, selection, by_module or {}, learned or []))
    return EXIT_OK


def _matched_text(head: str, selection: Selection, by_module: dict[str, int], learned: list[str]) -> str:
    """``head``, then which records ``--module`` matched, and why more than its name when it did."""
    if not by_module and not learned:
        text = f"{head}: nothing matched; `jitguard cache list` names the modules it holds."
    else:
        parts = [", ".join(f"{name} ({n})" for name, n in by_module.items()) or "no outcome"]
        if learned:
            parts.append(f"learned memory of {', '.join(learned)}")
        text = f"{head}: {'; '.join(parts)}."
    note = selection.note()
    return f"{text}\n({note}.)" if note else text


def _this_fingerprint() -> str | None:
    """This environment's fingerprint, as `jitguard doctor` computes it; None when the facts cannot be had."""
    from jitguard.facts import collect

    try:
        return collect(cache_dir=default_cache_dir()).fingerprint
    except Exception:  # the listing stands without it
        return None


def _fingerprints_line(here: str | None) -> str:
    """What the fingerprints in the table are (README.md, "Fingerprints")."""
    from rich.markup import escape

    this = (
        f"this environment's is {here}, as `jitguard doctor` shows it"
        if here
        else "this environment's is unknown"
    )
    return escape(
        f"fingerprint: the environment a record was made in, and it counts only there ({this}; here: yes). "
        "`jitguard build flashinfer-gdn` sets FLASHINFER_CUDA_ARCH_LIST (and FLASHINFER_WORKSPACE_BASE with "
        "--workspace): its records carry the fingerprint of that environment, which a serving process with the "
        "same variables has."
    )


def _selected_json(selection: Selection | None) -> dict[str, Any] | None:
    """What ``--module`` stood for: its exact names, its name prefixes, and the group's name (or null)."""
    if selection is None:
        return None
    return {"names": list(selection.names), "prefixes": list(selection.prefixes), "group": selection.group}


def _refuse_a_file_in_the_way(cache_dir: Any) -> None:
    """A cache dir that is a file (or under one) holds nothing to list or clear: exit 1 with what to move,
    not "No cached build outcomes"."""
    from jitguard.facts.disk import probe_path
    from jitguard.findings.checks_disk import blocked_directory, in_the_way

    entry = probe_path(cache_dir)
    if in_the_way(entry):
        findings = blocked_directory(entry, f"jitguard's cache dir ({entry.path}, JITGUARD_CACHE_DIR)")
        raise DirectoryInTheWay("jitguard's cache dir", entry.path, findings)


def _say_if_untrusted(cache_dir: Any) -> None:
    """The ``cache-dir-untrusted`` finding on stderr when jitguard refuses the cache dir (its records are
    then not listed: they are never believed)."""
    from jitguard.cli.report import console, render_findings
    from jitguard.facts.disk import probe_path
    from jitguard.findings.checks_disk import own_cache_dir

    refused = [f for f in own_cache_dir(probe_path(cache_dir)) if f.code == "cache-dir-untrusted"]
    if refused:
        render_findings(console(sys.stderr), refused, indent="")
