"""Drift made loud: whether the installed vLLM is a release jitguard knows, and which of its choice sites
jitguard can still find, without importing vLLM.

``SUPPORTED`` is the range of releases the sites were written against (``KNOWN`` its ends, as people write
them: a new release is added by moving both, and closing the range of any site it dropped, ``sites``).
``coverage()`` looks up each site's module on the import path and its function or method in the module's
source (``facts.source_names``), and folds them per choice (``decision.engine_release``): a site whose range
ended before the release is not expected there. ``say_once()`` is what ``register()`` logs: one warning
when the release is outside ``SUPPORTED``, one INFO line of coverage, and one warning naming each choice that
is not guarded (an INFO line for a vLLM without package metadata: a source tree, not a release). Both are
computed once per process.
"""

from __future__ import annotations

import functools
import importlib.metadata
import logging
import threading
from collections.abc import Sequence
from pathlib import Path

from packaging.specifiers import SpecifierSet

from jitguard.decision.engine_release import Coverage, SiteCheck, choice_coverage, release_warning
from jitguard.decision.engine_verdicts import CHOICES
from jitguard.facts.source_names import find_name

log = logging.getLogger("jitguard.vllm")
ENGINE = "vLLM"
SUPPORTED = SpecifierSet(">=0.17,<0.35")
KNOWN = ("0.17", "0.34")  # the oldest and newest release of SUPPORTED, as people write them
_said = threading.Event()


def installed_version() -> str | None:
    """The installed vLLM's version, from its metadata (vLLM is not imported); None when not installed."""
    try:
        return importlib.metadata.version("vllm")
    except (importlib.metadata.PackageNotFoundError, ValueError):
        return None


def drift_warning(version: str | None) -> str | None:
    """The warning for a vLLM release outside ``SUPPORTED``; None inside it."""
    return release_warning(ENGINE, version, SUPPORTED, "-".join(KNOWN))


def coverage(version: str | None = None, root: Path | None = None) -> Coverage:
    """Per choice, whether its sites are found in the vLLM at ``root`` (a directory holding the ``vllm``
    package; default: the import path) for ``version`` (default: the installed one). Cached per arguments."""
    path = (str(root),) if root is not None else None
    return _coverage(version if version is not None else installed_version(), path)


@functools.lru_cache(maxsize=8)
def _coverage(version: str | None, path: tuple[str, ...] | None) -> Coverage:
    # lazy: a cycle (the package's __init__ imports this module, and SITES is defined there)
    from jitguard.integrations.vllm import SITES

    search: Sequence[str] | None = list(path) if path is not None else None
    choices = []
    for choice in CHOICES:
        key = "attention" if choice.key == "kv-cache" else choice.key  # one site judges both
        checks = [
            SiteCheck(s.module, s.target, s.releases, find_name(s.module, s.target, search), s.layout)
            for s in SITES
            if s.choice.key == key
        ]
        choices.append(choice_coverage(choice.key, choice.title, checks, version, KNOWN))
    return Coverage(ENGINE, version, tuple(choices))


def say_once() -> None:
    """Log the release warning (outside ``SUPPORTED``), the coverage line and what is not guarded, once per
    process."""
    if _said.is_set():
        return
    _said.set()
    version = installed_version()
    warning = drift_warning(version)
    if warning:
        log.warning("%s", warning)
    found = coverage(version)
    log.info("jitguard: %s", found.summary)
    if found.unguarded:
        # A vLLM without metadata is a source tree on the path, not a release: said, not warned about.
        log.log(
            logging.WARNING if version else logging.INFO,
            "jitguard: %s: vLLM's own choice stands there, unguarded. Fix: upgrade jitguard "
            "(`pip install -U .` from a newer checkout).",
            found.unguarded,
        )


def forget() -> None:
    """Say it again in this process (tests; ``unregister()``)."""
    _said.clear()
    _coverage.cache_clear()
