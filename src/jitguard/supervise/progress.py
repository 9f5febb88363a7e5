"""Live progress of a supervised build: ninja's ``[k/n]`` status lines plus the tree's memory.

On a terminal the runner shows a rich progress bar; anywhere else (a log file, a container's stdout, another
rank) it writes a log line through ``logging`` every ``interval`` seconds, so a person tailing a server log
sees how far the build is, how much memory it takes and, once there is a basis for it, about how long is
left (``remaining_seconds``: the duration learned for the module on this host, scaled to the steps left, or the
rate observed in this build), instead of silence.
"""

from __future__ import annotations

import logging
import os
import re
import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import IO, TYPE_CHECKING, Any, Protocol

from jitguard.config import format_bytes

if TYPE_CHECKING:
    from jitguard.state.build_durations import BuildDuration

LOG = logging.getLogger("jitguard.supervise")

# The runner sets NINJA_STATUS to this, so the status prefix has one known form whatever the environment.
NINJA_STATUS = "[%f/%t] "
_STATUS = re.compile(r"^\[(\d+)/(\d+)\]")
PROGRESS_MODES = ("auto", "bar", "log", "none")
# Steps this build must finish before its own rate says how long is left (the first steps of a build say
# little: a slow first compile, a fast header step).
MIN_OBSERVED_STEPS = 2


def parse_status(line: str) -> tuple[int, int] | None:
    """``(finished, total)`` from a ninja status line such as ``[3/34] nvcc ...``, else None."""
    match = _STATUS.match(line)
    if not match:
        return None
    return int(match.group(1)), int(match.group(2))


def steps_total(lines: Iterable[str]) -> int:
    """The largest step total (ninja's ``n`` in ``[k/n]``) in ``lines``; 0 when there is none."""
    return max((status[1] for status in map(parse_status, lines) if status), default=0)


def remaining_seconds(
    done: int, total: int | None, elapsed: float, jobs: int, learned: BuildDuration | None
) -> float | None:
    """About how many seconds the build has left, or None when nothing says it yet.

    Until a quarter of the steps (and at least ``MIN_OBSERVED_STEPS``) are done, the duration learned for the
    module on this host, scaled to the steps left and the jobs; then the rate this build shows. Without a
    learned duration, nothing before ``MIN_OBSERVED_STEPS`` steps: a number from one step would look wrong.
    """
    if not total or done >= total:
        return None
    left = total - done
    if learned is not None and done < max(MIN_OBSERVED_STEPS, total // 4):
        return learned.seconds_for(left, jobs)
    if done >= MIN_OBSERVED_STEPS and elapsed > 0:
        return elapsed / done * left
    return None


def describe_remaining(seconds: float) -> str:
    """``about 3 min left`` (at least 1 min: a build with steps left is never "0 min" away)."""
    return f"about {max(1, round(seconds / 60))} min left"


@dataclass
class BuildProgress:
    """The state the reporters show. The runner updates it in place."""

    module: str
    jobs: int = 1
    attempt: int = 1
    done: int = 0
    total: int | None = None
    rss_bytes: int = 0
    peak_rss_bytes: int = 0
    started: float = field(default_factory=time.monotonic)
    waiting_for_slot: bool = False
    learned: BuildDuration | None = None  # the module's last build on this host, when one was recorded

    def feed(self, line: str) -> bool:
        """Take a line of ninja output; True when it moved the step counter."""
        status = parse_status(line)
        if status is None:
            return False
        done, total = status
        moved = done != self.done or total != self.total
        self.done, self.total = done, total
        return moved

    @property
    def elapsed(self) -> float:
        return time.monotonic() - self.started

    @property
    def steps(self) -> str:
        return f"{self.done}/{self.total}" if self.total else f"{self.done}/?"

    @property
    def left(self) -> str | None:
        """``about N min left``, when there is a basis for an estimate."""
        seconds = remaining_seconds(self.done, self.total, self.elapsed, self.jobs, self.learned)
        return describe_remaining(seconds) if seconds is not None else None

    def summary(self) -> str:
        text = (
            f"{self.module}: {self.steps} steps, {self.jobs} job{'s' if self.jobs != 1 else ''}, "
            f"memory {format_bytes(self.rss_bytes)} (peak {format_bytes(self.peak_rss_bytes)}), "
            f"{self.elapsed:.0f} s"
        )
        if self.left:
            text += f", {self.left}"
        if self.attempt > 1:
            text += f", attempt {self.attempt}"
        if self.waiting_for_slot:
            text += ", waiting for a host-wide compile slot"
        return text


class Reporter(Protocol):
    def update(self, progress: BuildProgress) -> None: ...

    def message(self, text: str) -> None: ...

    def close(self) -> None: ...


class NullReporter:
    def update(self, progress: BuildProgress) -> None:
        pass

    def message(self, text: str) -> None:
        LOG.debug("%s", text)

    def close(self) -> None:
        pass


class LogReporter:
    """A log line every ``interval`` seconds and whenever the runner has something to say."""

    def __init__(self, interval: float = 15.0, logger: logging.Logger = LOG) -> None:
        self.interval = interval
        self.logger = logger
        self._last = 0.0

    def update(self, progress: BuildProgress) -> None:
        now = time.monotonic()
        if now - self._last >= self.interval:
            self._last = now
            self.logger.info("building %s", progress.summary())

    def message(self, text: str) -> None:
        self.logger.info("%s", text)

    def close(self) -> None:
        pass


class BarReporter:
    """A rich progress bar (steps, memory now and at peak, jobs) on a terminal."""

    def __init__(self, stream: IO[str]) -> None:
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        no_color = bool(os.environ.get("NO_COLOR"))  # no escape sequences for colour or bold at all
        self._console = Console(file=stream, no_color=no_color, color_system=None if no_color else "auto")
        self._bar = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TextColumn("{task.fields[detail]}"),
            console=self._console,
            transient=False,
        )
        self._task: Any = None
        self._bar.start()

    def update(self, progress: BuildProgress) -> None:
        now, peak = format_bytes(progress.rss_bytes), format_bytes(progress.peak_rss_bytes)
        detail = f"-j{progress.jobs}  mem {now} (peak {peak})"
        if progress.left:
            detail += f"  {progress.left}"
        if progress.waiting_for_slot:
            detail += "  waiting for a compile slot"
        if self._task is None:
            self._task = self._bar.add_task(progress.module, total=progress.total, detail=detail)
        self._bar.update(self._task, completed=progress.done, total=progress.total, detail=detail)

    def message(self, text: str) -> None:
        self._console.print(text)
        LOG.debug("%s", text)

    def close(self) -> None:
        self._bar.stop()


def make_reporter(mode: str = "auto", *, stream: IO[str] | None = None, interval: float = 15.0) -> Reporter:
    """``auto``: a bar when ``stream`` (default stderr) is a terminal, log lines otherwise."""
    if mode not in PROGRESS_MODES:
        raise ValueError(f"progress mode {mode!r}: expected one of {', '.join(PROGRESS_MODES)}")
    stream = stream or sys.stderr
    if mode == "none":
        return NullReporter()
    if mode == "bar" or (mode == "auto" and _is_terminal(stream)):
        return BarReporter(stream)
    return LogReporter(interval)


def _is_terminal(stream: IO[str]) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False
