"""What the command modules share about their parsers: a command group asked for without its action."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

from jitguard.errors import UsageError


def needs_action(parser: argparse.ArgumentParser, message: str) -> Callable[[argparse.Namespace], int]:
    """The ``execute`` of a command group (``jitguard cache``): its help on stderr, then a usage error."""

    def show(_args: argparse.Namespace) -> int:
        parser.print_help(sys.stderr)
        raise UsageError(message)

    return show
