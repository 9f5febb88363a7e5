"""The `jitguard` command. One module per command, each with ``configure(parser)`` and ``execute(args) -> int``;
heavy imports happen inside ``execute`` so `--help` is instant."""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from jitguard import __version__
from jitguard.errors import EXIT_FAILURE, EXIT_USAGE, JitguardError
from jitguard.redaction import redact_text

COMMANDS = ("doctor", "build", "cache", "gdn")


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        self.print_usage(sys.stderr)
        sys.stderr.write(f"jitguard: error: {message}\n")
        raise SystemExit(EXIT_USAGE)


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
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "execute", None):
        parser.print_help()
        return EXIT_USAGE
    try:
        return int(args.execute(args))
    except JitguardError as exc:
        sys.stderr.write(f"jitguard: {redact_text(str(exc))}\n")
        return exc.exit_code
    except KeyboardInterrupt:
        sys.stderr.write("jitguard: interrupted\n")
        return 130
    except BrokenPipeError:
        return EXIT_FAILURE


if __name__ == "__main__":
    raise SystemExit(main())
