"""What the command modules share about their parsers: a command group asked for without its action."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

from jitguard.config import parse_store_url
from jitguard.errors import ConfigError, UsageError


def needs_action(parser: argparse.ArgumentParser, message: str) -> Callable[[argparse.Namespace], int]:
    """The ``execute`` of a command group (``jitguard cache``): its help on stderr, then a usage error."""

    def show(_args: argparse.Namespace) -> int:
        parser.print_help(sys.stderr)
        raise UsageError(message)

    return show


def store_url(flag: str) -> Callable[[str], str]:
    """The ``type=`` of a store URL flag (``--store``, ``--share``, ``--publish``): checked as JITGUARD_SHARE
    is (``jitguard.config.parse_store_url``: ``file://relative/dir`` is refused with ``file:///abs/path``)."""

    def parse(text: str) -> str:
        try:
            return parse_store_url(text, name=flag)
        except ConfigError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    return parse
