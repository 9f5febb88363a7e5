"""Installed-package metadata made up for tests: a ``.dist-info`` that importlib.metadata reads like a real one,
in a directory the ``site`` fixture (tests/conftest.py) puts first on sys.path; with ``make_installed``, the
files too and the RECORD pip writes for them."""

from __future__ import annotations

import base64
import csv
import hashlib
from collections.abc import Mapping
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


def record_hash(data: bytes) -> str:
    """The ``sha256=...`` field of a RECORD line for ``data`` (urlsafe base64, no padding, as pip writes it)."""
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"sha256={digest}"


def make_installed(
    site: Path, name: str, version: str, files: Mapping[str, bytes], requires: tuple[str, ...] = ()
) -> Path:
    """A distribution as pip leaves an installed wheel: ``files`` (paths relative to ``site``) written, and a
    dist-info whose RECORD lists each of them and its own files with sha256 and size (RECORD itself without).
    Returns the dist-info directory."""
    info = site / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True)
    own = {
        "METADATA": "\n".join(
            ["Metadata-Version: 2.1", f"Name: {name}", f"Version: {version}"]
            + [f"Requires-Dist: {r}" for r in requires]
        ).encode()
        + b"\n",
        "INSTALLER": b"pip\n",
    }
    listed = {**files, **{f"{info.name}/{n}": data for n, data in own.items()}}
    rows = []
    for path, data in listed.items():
        target = site / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
        rows.append([path, record_hash(data), str(len(data))])
    rows.append([f"{info.name}/RECORD", "", ""])
    with (info / "RECORD").open("w", newline="") as f:
        csv.writer(f).writerows(rows)
    return info
