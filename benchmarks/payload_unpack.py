"""On the device host: join a payload's parts and unpack its site dir (``DEST/site``).

    python3 -m pip install -q --no-index --no-deps --target /tmp/zst zstandard-*.whl
    PYTHONPATH=/tmp/zst python3 unpack.py DEST part.0 part.1 ...

The parts are one zstd stream (``--long=27``: a 128 MiB window) of one tar, split at 60 MB; they are read in
name order as one file, so no joined copy is written (the host's /tmp holds the parts and the site only)."""

from __future__ import annotations

import sys
import tarfile
import time
from typing import BinaryIO, cast

import zstandard


class Joined:
    """The parts, read back to back as one stream."""

    def __init__(self, paths: list[str]) -> None:
        self.files: list[BinaryIO] = [open(p, "rb") for p in paths]  # noqa: SIM115 - closed as read
        self.index = 0

    def read(self, size: int = -1) -> bytes:
        while self.index < len(self.files):
            block = self.files[self.index].read(size)
            if block:
                return block
            self.files[self.index].close()
            self.index += 1
        return b""


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print("usage: unpack.py DEST PART...", file=sys.stderr)
        return 2
    dest, parts = argv[0], sorted(argv[1:], key=lambda p: int(p.rsplit(".", 1)[-1]))
    started = time.monotonic()
    source = cast(BinaryIO, Joined(parts))  # zstandard reads it through .read() alone
    reader = zstandard.ZstdDecompressor(max_window_size=2**31).stream_reader(source)
    with reader, tarfile.open(fileobj=reader, mode="r|") as archive:
        archive.extractall(dest, filter="tar")
    print(f"unpacked {len(parts)} parts into {dest}/site in {time.monotonic() - started:.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
