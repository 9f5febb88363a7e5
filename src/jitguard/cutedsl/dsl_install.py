"""The nvidia-cutlass-dsl wheels' installed files against their RECORD (sha256 and size).

Sibling DSL wheels can write the same paths with different contents, and a mix imports, then fails when a
kernel compiles (docs/findings.md). Pure facts: per distribution, the files missing or differing and whose
RECORD a differing file matches; the checks (``dsl_checks``) judge. Digests are kept by path,
size, mtime, ctime and inode, in process and in ``<cache_dir>/dsl/digests.json`` (docs/cutedsl.md).
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import importlib.metadata as metadata
import json
import os
import re
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from jitguard import fileio

PREFIX = "nvidia-cutlass-dsl"
_CHUNK = 1 << 20
DIGESTS_FILE = Path("dsl") / "digests.json"  # under jitguard's cache dir
_DIGESTS_SCHEMA = 1

# (path, size, mtime_ns, ctime_ns, inode, algorithm) -> the urlsafe-base64 digest RECORD would hold for that
# content.
_Key = tuple[str, int, int, int, int, str]
_DIGESTS: dict[_Key, str] = {}


@dataclass(frozen=True)
class DifferingFile:
    path: str  # as the RECORD lists it (relative to the site directory)
    size: int  # on disk
    listed_by: tuple[str, ...]  # the other installed DSL distributions whose RECORD lists this path too
    matches: str | None  # the one of those whose RECORD entry the file's content matches (its copy won)


@dataclass(frozen=True)
class DistCheck:
    name: str  # normalised, e.g. "nvidia-cutlass-dsl-libs-cu13"
    version: str
    location: str  # the site directory it is installed in
    files_checked: int  # RECORD entries that carry a hash
    missing: tuple[str, ...]
    differ: tuple[DifferingFile, ...]
    unreadable: tuple[str, ...]  # present but could not be read (permissions)
    shares_paths_with: tuple[
        str, ...
    ]  # other installed DSL distributions whose RECORD lists a path of this one's
    unverifiable: str | None = None  # why its files could not be checked at all (no RECORD), else None

    @property
    def intact(self) -> bool:
        return self.unverifiable is None and not (self.missing or self.differ or self.unreadable)


@dataclass(frozen=True)
class DslInstallFacts:
    dists: tuple[DistCheck, ...]  # sorted by name
    bytes_hashed: int  # read this time; 0 when every digest came from this process's cache
    seconds: float

    def get(self, name: str) -> DistCheck | None:
        key = normalise(name)
        return next((d for d in self.dists if d.name == key), None)


@dataclass(frozen=True)
class _Entry:
    dist: str
    path: str  # as listed
    absolute: str
    algorithm: str
    digest: str
    size: int | None


def normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def probe(path: Sequence[str] | None = None, *, cache_dir: Path | None = None) -> DslInstallFacts:
    """Check every installed distribution whose name starts with ``nvidia-cutlass-dsl`` (the first of each name
    on ``path``, default sys.path: the one ``importlib.metadata`` and pip see). ``cache_dir``: jitguard's, where
    the digests of an earlier process are read and this one's kept."""
    start = time.perf_counter()
    recalled = _recall(Path(cache_dir)) if cache_dir is not None else {}
    found: dict[str, metadata.Distribution] = {}
    for dist in metadata.distributions(path=list(sys.path if path is None else path)):
        name = normalise(dist.metadata["Name"] or "")
        if name.startswith(PREFIX) and name not in found:
            found[name] = dist

    entries: dict[str, list[_Entry]] = {}
    unverifiable: dict[str, str] = {}
    for name, dist in found.items():
        try:
            entries[name] = _entries(name, dist)
        except _Unverifiable as exc:
            unverifiable[name] = str(exc)
    listing: dict[str, list[_Entry]] = {}  # absolute path -> every DSL distribution's entry for it
    for dist_entries in entries.values():
        for entry in dist_entries:
            listing.setdefault(entry.absolute, []).append(entry)

    hashed = [0]
    checks = []
    for name in sorted(found):
        dist = found[name]
        location = os.path.normpath(str(dist.locate_file("")))
        if name in unverifiable:
            checks.append(
                DistCheck(name, dist.version or "", location, 0, (), (), (), (), unverifiable[name])
            )
            continue
        missing, differ, unreadable = [], [], []
        shared: set[str] = set()
        for entry in entries[name]:
            others = [o for o in listing[entry.absolute] if o.dist != name]
            shared.update(o.dist for o in others)
            outcome = _check(entry, others, hashed)
            if outcome == "missing":
                missing.append(entry.path)
            elif outcome == "unreadable":
                unreadable.append(entry.path)
            elif isinstance(outcome, DifferingFile):
                differ.append(outcome)
        checks.append(
            DistCheck(
                name=name,
                version=dist.version or "",
                location=location,
                files_checked=len(entries[name]),
                missing=tuple(missing),
                differ=tuple(differ),
                unreadable=tuple(unreadable),
                shares_paths_with=tuple(sorted(shared)),
            )
        )
    if cache_dir is not None:
        _keep(Path(cache_dir), {e.absolute for es in entries.values() for e in es}, recalled)
    return DslInstallFacts(tuple(checks), hashed[0], time.perf_counter() - start)


def _recall(cache_dir: Path) -> dict[_Key, str]:
    """Digests an earlier process kept (what the file holds); a missing, untrusted or malformed file adds
    nothing."""
    data = fileio.read_json(cache_dir / DIGESTS_FILE, root=cache_dir)
    if data is None or data.get("schema") != _DIGESTS_SCHEMA or not isinstance(data.get("digests"), list):
        return {}
    found: dict[_Key, str] = {}
    for item in data["digests"]:
        if (
            isinstance(item, list)
            and len(item) == 7
            and isinstance(item[0], str)
            and all(isinstance(v, int) and not isinstance(v, bool) for v in item[1:5])
            and all(isinstance(v, str) for v in item[5:])
        ):
            key = (item[0], item[1], item[2], item[3], item[4], item[5])
            _DIGESTS.setdefault(key, item[6])
            found[key] = item[6]
    return found


def _keep(cache_dir: Path, paths: set[str], recalled: dict[_Key, str]) -> None:
    """This process's digests of the files the DSL lists now (so the file never grows past one install),
    unless the file already holds them all; a cache dir that cannot take it only costs the next process the
    hashing."""
    current = {key: digest for key, digest in _DIGESTS.items() if key[0] in paths}
    if not current or current.items() <= recalled.items():
        return
    kept = [[*key, digest] for key, digest in sorted(current.items())]
    data = json.dumps({"schema": _DIGESTS_SCHEMA, "digests": kept}, separators=(",", ":")).encode()
    with contextlib.suppress(OSError):  # not write_json: its redaction would take digests for secrets
        fileio.write_atomic(cache_dir / DIGESTS_FILE, data, root=cache_dir)


class _Unverifiable(Exception):
    pass


def _entries(name: str, dist: metadata.Distribution) -> list[_Entry]:
    try:
        files = dist.files
    except Exception as exc:  # a malformed RECORD makes one distribution unverifiable, not the others
        raise _Unverifiable(f"its RECORD cannot be read: {type(exc).__name__}: {exc}") from exc
    if files is None:
        raise _Unverifiable("it has no RECORD (installed by a tool that writes none)")
    entries = []
    for file in files:
        if file.hash is None:  # RECORD itself, byte-compiled files: listed without a hash
            continue
        if file.hash.mode not in hashlib.algorithms_available:
            raise _Unverifiable(f"its RECORD uses a hash jitguard cannot compute: {file.hash.mode}")
        absolute = os.path.normpath(str(dist.locate_file(file)))
        entries.append(_Entry(name, str(file), absolute, file.hash.mode, file.hash.value, file.size))
    return entries


def _check(entry: _Entry, others: list[_Entry], hashed: list[int]) -> str | DifferingFile | None:
    """None when the file is as its RECORD lists it; "missing", "unreadable", or how it differs."""
    try:
        st = os.stat(entry.absolute)
    except (FileNotFoundError, NotADirectoryError):
        return "missing"
    except OSError:
        return "unreadable"
    listed_by = tuple(sorted({o.dist for o in others}))
    sizes = {e.size for e in (entry, *others)}
    if None not in sizes and st.st_size not in sizes:
        # No wheel's copy has this size: it differs from all of them, without reading it.
        return DifferingFile(entry.path, st.st_size, listed_by, None)
    try:
        read_before = hashed[0]
        digest = _digest(entry.absolute, st, entry.algorithm, hashed)
        if digest != entry.digest and hashed[0] == read_before:
            # a kept digest never makes a file differ: the file is read again before it is reported
            digest = _digest(entry.absolute, st, entry.algorithm, hashed, fresh=True)
        if digest == entry.digest and entry.size in (None, st.st_size):
            return None
        matches = next(
            (
                o.dist
                for o in others
                if o.size in (None, st.st_size) and _digest(o.absolute, st, o.algorithm, hashed) == o.digest
            ),
            None,
        )
    except OSError:
        return "unreadable"
    return DifferingFile(entry.path, st.st_size, listed_by, matches)


def _digest(path: str, st: os.stat_result, algorithm: str, hashed: list[int], *, fresh: bool = False) -> str:
    """The digest of ``path`` as it is now (``st``); ``fresh``: read it even when one is kept."""
    key = (path, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, algorithm)
    cached = None if fresh else _DIGESTS.get(key)
    if cached is not None:
        return cached
    h = hashlib.new(algorithm)
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
            hashed[0] += len(chunk)
    digest = base64.urlsafe_b64encode(h.digest()).rstrip(b"=").decode("ascii")
    _DIGESTS[key] = digest
    return digest
