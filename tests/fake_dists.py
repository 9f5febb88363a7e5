"""Installed-package metadata made up for tests: a ``.dist-info`` that importlib.metadata reads like a real one,
in a directory the ``site`` fixture (tests/conftest.py) puts first on sys.path."""

from __future__ import annotations

from pathlib import Path


def make_dist(site: Path, name: str, version: str | None, requires: tuple[str, ...] = ()) -> None:
    """A distribution ``name`` at ``version`` (None: metadata without a Version line) in ``site``."""
    info = site / f"{name.replace('-', '_')}-{version or '0'}.dist-info"
    info.mkdir(parents=True)
    lines = ["Metadata-Version: 2.1", f"Name: {name}"]
    if version is not None:
        lines.append(f"Version: {version}")
    lines += [f"Requires-Dist: {r}" for r in requires]
    (info / "METADATA").write_text("\n".join(lines) + "\n")
