"""ninja's build log: objects built through jitguard count as built for plain ``ninja``, and back.

ninja trusts a ``.ninja_log`` entry only for the hash of the command that would build the output now, and the
runner's commands start with the slot launcher (``supervise.manifest``). ``translate`` appends, for each
output, an entry for the other manifest's command (log versions 5-7: MurmurHash64A, then rapidhash), so a
prebuilt module is not compiled again at serving time.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

LOG_NAME = ".ninja_log"
_M64 = (1 << 64) - 1

# MurmurHash64A as ninja 1.10-1.12 seed it.
_MURMUR_SEED = 0xDECAFBADDECAFBAD
_MURMUR_M = 0xC6A4A7935BD1E995

# rapidhash (the version vendored by ninja 1.13) and its default seed and secrets.
_RAPID_SEED = 0xBDD89AA982704029
_S0, _S1, _S2 = 0x2D358DCCAA6C78A5, 0x8BB84B93962EACC9, 0x4B33A62ED433D4A3


def murmur64a(data: bytes) -> int:
    length = len(data)
    h = _MURMUR_SEED ^ ((length * _MURMUR_M) & _M64)
    whole = length - length % 8
    for i in range(0, whole, 8):
        k = int.from_bytes(data[i : i + 8], "little")
        k = (k * _MURMUR_M) & _M64
        k ^= k >> 47
        k = (k * _MURMUR_M) & _M64
        h ^= k
        h = (h * _MURMUR_M) & _M64
    tail = data[whole:]
    if tail:
        h ^= int.from_bytes(tail, "little")
        h = (h * _MURMUR_M) & _M64
    h ^= h >> 47
    h = (h * _MURMUR_M) & _M64
    h ^= h >> 47
    return h


def _mum(a: int, b: int) -> tuple[int, int]:
    product = a * b
    return product & _M64, product >> 64


def _mix(a: int, b: int) -> int:
    low, high = _mum(a, b)
    return low ^ high


def rapidhash(data: bytes, seed: int = _RAPID_SEED) -> int:
    def r64(i: int) -> int:
        return int.from_bytes(data[i : i + 8], "little")

    def r32(i: int) -> int:
        return int.from_bytes(data[i : i + 4], "little")

    length = len(data)
    seed ^= _mix(seed ^ _S0, _S1) ^ length
    if length <= 16:
        if length >= 4:
            last = length - 4
            a = (r32(0) << 32) | r32(last)
            delta = (length & 24) >> (length >> 3)
            b = (r32(delta) << 32) | r32(last - delta)
        elif length > 0:
            a = (data[0] << 56) | (data[length >> 1] << 32) | data[length - 1]
            b = 0
        else:
            a = b = 0
    else:
        p, i = 0, length
        if i > 48:
            see1 = see2 = seed
            while i >= 48:
                seed = _mix(r64(p) ^ _S0, r64(p + 8) ^ seed)
                see1 = _mix(r64(p + 16) ^ _S1, r64(p + 24) ^ see1)
                see2 = _mix(r64(p + 32) ^ _S2, r64(p + 40) ^ see2)
                p += 48
                i -= 48
            seed ^= see1 ^ see2
        if i > 16:
            seed = _mix(r64(p) ^ _S2, r64(p + 8) ^ seed ^ _S1)
            if i > 32:
                seed = _mix(r64(p + 16) ^ _S2, r64(p + 24) ^ seed)
        a, b = r64(p + i - 16), r64(p + i - 8)
    a, b = _mum(a ^ _S1, b ^ seed)
    return _mix(a ^ _S0 ^ length, b ^ _S1)


def command_hash(command: str, version: int) -> int | None:
    """The hash ninja's log of ``version`` stores for ``command``; None for a version jitguard does not know."""
    data = command.encode("utf-8", "surrogateescape")
    if version in (5, 6):
        return murmur64a(data)
    if version == 7:
        return rapidhash(data)
    return None


def log_path(build_dir: Path, manifest: Path) -> Path:
    """Where ninja keeps the log of ``manifest`` run in ``build_dir`` (honours a literal top-level builddir)."""
    try:
        lines = Path(manifest).read_text("utf-8", "surrogateescape").splitlines()
    except OSError:
        lines = []
    for line in lines:
        if line.startswith("builddir") and "=" in line and "$" not in line:
            name, _, value = line.partition("=")
            if name.strip() == "builddir" and value.strip():
                return Path(build_dir) / value.strip() / LOG_NAME
    return Path(build_dir) / LOG_NAME


def read_version(path: Path) -> int | None:
    try:
        with open(path, encoding="utf-8", errors="surrogateescape") as f:
            first = f.readline()
    except OSError:
        return None
    prefix = "# ninja log v"
    return (
        int(first[len(prefix) :])
        if first.startswith(prefix) and first[len(prefix) :].strip().isdigit()
        else None
    )


def latest_entries(path: Path) -> dict[str, tuple[str, str, str, int]]:
    """output -> (start, end, mtime, hash) of its last entry."""
    entries: dict[str, tuple[str, str, str, int]] = {}
    try:
        text = path.read_text("utf-8", "surrogateescape")
    except OSError:
        return entries
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        fields = line.split("\t")
        if len(fields) != 5:
            continue
        try:
            entries[fields[3]] = (fields[0], fields[1], fields[2], int(fields[4], 16))
        except ValueError:
            continue
    return entries


def compdb(
    ninja: str, build_dir: Path, manifest: Path, *, timeout: float = 60.0
) -> dict[tuple[str, str], str]:
    """(input, output) -> evaluated command, for every edge with inputs (``ninja -t compdb``)."""
    try:
        proc = subprocess.run(
            [ninja, "-C", str(build_dir), "-f", str(Path(manifest).resolve()), "-t", "compdb"],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            encoding="utf-8",
            errors="surrogateescape",  # commands are hashed: keep their exact bytes
            timeout=timeout,
        )
        rows = json.loads(proc.stdout) if proc.returncode == 0 else []
    except (OSError, subprocess.TimeoutExpired, ValueError):
        return {}
    return {
        (str(row.get("file", "")), str(row.get("output", ""))): str(row.get("command", ""))
        for row in rows
        if isinstance(row, dict) and row.get("command")
    }


def translate(log: Path, source: dict[tuple[str, str], str], target: dict[tuple[str, str], str]) -> int:
    """Append entries so outputs last built with a ``source`` command count as built with the ``target`` one.

    ``source`` and ``target`` are ``compdb`` results of the two manifests. Returns how many entries were added.
    """
    version = read_version(log)
    if version is None or command_hash("", version) is None:
        return 0
    mapping: dict[int, int] = {}
    for key, command in source.items():
        other = target.get(key)
        if other is None or other == command:
            continue
        before, after = command_hash(command, version), command_hash(other, version)
        if before is not None and after is not None:
            mapping[before] = after
    if not mapping:
        return 0
    added = []
    for output, (start, end, mtime, digest) in latest_entries(log).items():
        if digest in mapping:
            added.append(f"{start}\t{end}\t{mtime}\t{output}\t{mapping[digest]:x}\n")
    if added:
        with open(log, "a", encoding="utf-8", errors="surrogateescape") as f:
            f.writelines(added)
    return len(added)
