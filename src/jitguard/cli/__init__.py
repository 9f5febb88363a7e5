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

COMMANDS = ("doctor", "build", "cache", "gdn", "warm")


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        # Raised, not exited: main() reports it like every other usage error (as an envelope under --json).
        self.print_usage(sys.stderr)
        raise UsageError(f"{message}. See `{self.prog} --help`.")


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
    parser = build_parser()
    args: argparse.Namespace | None = None
    try:
        args = parser.parse_args(argv)
        if not getattr(args, "execute", None):
            parser.print_help()
            return EXIT_USAGE
        return int(args.execute(args))
    except JitguardError as exc:
        sys.stderr.write(f"jitguard: {redact_text(str(exc))}\n")
        if _wants_json(args, argv):
            from jitguard.cli.envelope import error_dumps

            sys.stdout.write(error_dumps(exc) + "\n")
        return exc.exit_code
    except KeyboardInterrupt:
        sys.stderr.write("jitguard: interrupted\n")
        return 130
    except BrokenPipeError:
        return EXIT_FAILURE
    except ImportError as exc:
        # One of jitguard's own dependencies is missing or broken: say which and how to fix it, no traceback.
        from jitguard.facts.installation import package_for_module
        from jitguard.findings.checks_jitguard import repair

        fix = repair(f"{type(exc).__name__}: {exc}")
        ours = package_for_module(exc.name or "") is not None
        head = "[jitguard-dependency-missing] " if ours else "this command needs a package that is missing: "
        sys.stderr.write(
            f"jitguard: {head}{type(exc).__name__}: {exc}\n  Fix: {fix['repair']} `{fix['repair_command']}`\n"
        )
        return EXIT_FAILURE


def _wants_json(args: argparse.Namespace | None, argv: list[str]) -> bool:
    """Whether the command was asked for JSON; when the arguments did not parse, whether they ask for it."""
    if args is not None:
        return bool(getattr(args, "json", False))
    options = argv[: argv.index("--")] if "--" in argv else argv
    return "--json" in options


if __name__ == "__main__":
    raise SystemExit(main())
