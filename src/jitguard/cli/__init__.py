"""The `jitguard` command. One module per command, each with ``configure(parser)`` and ``execute(args) -> int``;
heavy imports happen inside ``execute`` so `--help` is instant."""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence
from typing import NoReturn

from jitguard import __version__
from jitguard.errors import EXIT_FAILURE, EXIT_USAGE, JitguardError, UsageError
from jitguard.redaction import redact_text

COMMANDS = ("doctor", "build", "cache", "gdn", "warm", "starts")


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        # Raised, not exited: main() reports it like every other usage error (as an envelope under --json).
        self.print_usage(sys.stderr)
        raise UsageError(f"{message.rstrip('.')}. See `{self.prog} --help`.")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="jitguard",
        description="Make JIT-compiled GPU kernels (FlashInfer GDN prefill and friends) safe to load.",
        epilog="Exit codes: 0 fine, 1 a blocking finding or failed build, 2 usage error.",
    )
    parser.add_argument("--version", action="version", version=f"jitguard {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for name in COMMANDS:
        try:
            module = importlib.import_module(f"jitguard.cli.{name}")
        except ModuleNotFoundError as exc:
            if exc.name != f"jitguard.cli.{name}":
                raise
            continue
        module.configure(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    _plain_where_unicode_cannot_go()
    parser = build_parser()
    args: argparse.Namespace | None = None
    try:
        args = parser.parse_args(argv)
        if not getattr(args, "execute", None):
            parser.print_help()
            sys.stderr.write(f"jitguard: give a command: {', '.join(COMMANDS)}. See `jitguard --help`.\n")
            return EXIT_USAGE
        return int(args.execute(args))
    except JitguardError as exc:
        return _report(exc, args, argv)
    except KeyboardInterrupt:
        sys.stderr.write("jitguard: interrupted\n")
        return 130
    except BrokenPipeError:
        return EXIT_FAILURE
    except ImportError as exc:
        # A package this command needs (one of jitguard's own, or the engine's: torch) is missing or broken.
        return _report(_missing_package(exc), args, argv)


def _report(exc: JitguardError, args: argparse.Namespace | None, argv: list[str]) -> int:
    """An error for a person on stderr and, under --json, its ``jitguard.error/1`` envelope on stdout."""
    sys.stderr.write(f"jitguard: {redact_text(str(exc))}\n")
    if _wants_json(args, argv):
        from jitguard.cli.envelope import error_dumps

        sys.stdout.write(error_dumps(exc) + "\n")
    return exc.exit_code


def _missing_package(exc: ImportError) -> JitguardError:
    """What an ImportError means here: which package, whose (jitguard's or the engine's) and what to type."""
    from jitguard.facts.installation import package_for_module
    from jitguard.findings.checks_jitguard import repair

    text = f"{type(exc).__name__}: {exc}"
    fix = repair(f"No module named '{exc.name}'" if exc.name else text)
    ours = package_for_module(exc.name or "") is not None
    head = "[jitguard-dependency-missing] " if ours else "this command needs a package that is missing: "
    return JitguardError(f"{head}{text}\n  Fix: {fix['repair']} `{fix['repair_command']}`")


def _plain_where_unicode_cannot_go() -> None:
    """On a stream that cannot write Unicode (``PYTHONIOENCODING=ascii``, a Latin-1 terminal), what it cannot
    encode becomes '?' instead of a UnicodeEncodeError: the report stays readable plain text (its marks are
    ASCII there: ``report.render_findings``), and JSON is ASCII anyway."""
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        encoding = (getattr(stream, "encoding", None) or "utf-8").lower().replace("_", "-")
        if reconfigure is not None and encoding not in ("utf-8", "utf8"):
            reconfigure(errors="replace")


def _wants_json(args: argparse.Namespace | None, argv: list[str]) -> bool:
    """Whether the command was asked for JSON; when the arguments did not parse, whether they ask for it."""
    if args is not None:
        return bool(getattr(args, "json", False))
    options = argv[: argv.index("--")] if "--" in argv else argv
    return "--json" in options


if __name__ == "__main__":
    raise SystemExit(main())
