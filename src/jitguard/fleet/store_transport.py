"""The store's primitives, for every kind of thing the fleet keeps in it (modules, CuTeDSL kernels, warm
snapshots): content-addressed blobs ``<layout>/blobs/<sha256>`` and named documents (manifests) under one
layout root, reached through fsspec inside one bounded session (``ArtifactStore.session``).

Reads verify as they go (``copy_blob``: size and SHA-256, or ``ArtifactRejected``); writes on a filesystem go
to a temporary name and are renamed, so no reader on another host sees half a file (an object store's PUT is
atomic). Every call checks the session's cancel flag, so a session given up on stops at its next step.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO

from jitguard import fileio
from jitguard.redaction import redact_text, redact_url

_CHUNK = fileio.CHUNK
_LOCAL_PROTOCOLS = ("file", "local")


class StoreUnavailable(Exception):
    """The store could not be used: not installed (fsspec / s3fs), not there, or no answer in time. Its text
    is redacted when it is made: a client's error may quote a signed URL or a credential."""

    def __init__(self, message: str) -> None:
        super().__init__(redact_text(message))


class ArtifactRejected(Exception):
    """The store's bytes do not check out (malformed manifest, a blob of the wrong size or digest): an
    integrity event, never to be reported as a store that is down."""

    def __init__(self, message: str) -> None:
        super().__init__(redact_text(message))


def describe_url(url: str) -> str:
    """The URL without credentials (user info, signed query parameters): safe for a log line."""
    return redact_url(url)


class StoreView:
    """The store opened inside one ``ArtifactStore.session``: content-addressed blobs and named documents
    (manifests) under the layout root. Every call checks the session's cancel flag first."""

    def __init__(self, url: str, fs: Any, root: str, cancelled: threading.Event) -> None:
        self.url = url
        self.fs = fs
        self.root = root
        self.cancelled = cancelled

    def check_cancelled(self) -> None:
        if self.cancelled.is_set():
            raise StoreUnavailable("cancelled")

    @property
    def local(self) -> bool:
        protocol = self.fs.protocol if isinstance(self.fs.protocol, tuple) else (self.fs.protocol,)
        return any(p in _LOCAL_PROTOCOLS for p in protocol)

    def blob_path(self, sha256: str) -> str:
        if not fileio.is_sha256(sha256):
            raise ValueError(f"not a SHA-256 digest: {sha256!r}")
        return f"{self.root}/blobs/{sha256}"

    def has_blob(self, sha256: str, size: int) -> bool:
        """These very bytes are in the store already: the blob there is read and hashed (a same-size blob
        with other bytes, poisoned or damaged, is replaced, not kept). A local blob is read only as a regular
        file, never through a link."""
        self.check_cancelled()
        path = self.blob_path(sha256)
        if self.local:
            return fileio.sha256_regular(Path(path), limit=size) == sha256
        try:
            if _size(self.fs, path) != size:
                return False
            with self.fs.open(path, "rb") as source:
                return fileio.sha256_stream(source) == (sha256, size)
        except FileNotFoundError:
            return False

    def put_blob(self, source: Path | BinaryIO, sha256: str) -> None:
        """Store ``source`` (a path, or a binary file read from where it stands) as the blob ``sha256``."""
        self.check_cancelled()
        if isinstance(source, Path):
            with open(source, "rb") as handle:
                self._write(self.blob_path(sha256), lambda target: self._stream_to(handle, target))
        else:
            self._write(self.blob_path(sha256), lambda target: self._stream_to(source, target))

    def _stream_to(self, source: BinaryIO, target: str) -> None:
        with self.fs.open(target, "wb") as out:
            shutil.copyfileobj(source, out, _CHUNK)

    def write_document(self, name: str, body: bytes) -> None:
        """Write a document (a manifest) at ``name`` under the layout root; seen whole or not at all."""
        self.check_cancelled()
        self._write(f"{self.root}/{_document(name)}", lambda target: self.fs.pipe_file(target, body))

    def read_document(self, name: str, limit: int) -> bytes | None:
        """The document at ``name``, None when the store has none there. Raises StoreUnavailable when the store
        itself is not there, ArtifactRejected for a document over ``limit`` bytes."""
        self.check_cancelled()
        path = f"{self.root}/{_document(name)}"
        try:
            size = _size(self.fs, path)
        except FileNotFoundError:
            if not self._store_exists():
                raise StoreUnavailable(f"there is no store at {describe_url(self.url)}") from None
            return None
        if size is not None and size > limit:
            raise ArtifactRejected(f"{name} is {size} bytes, more than it can be ({limit})")
        try:
            if self.local:
                with fileio.open_regular(path) as handle:
                    raw = handle.read(limit + 1)
            else:
                raw = bytes(self.fs.cat_file(path, start=0, end=limit + 1))
        except FileNotFoundError:
            return None
        if len(raw) > limit:
            raise ArtifactRejected(f"{name} is more than {limit} bytes")
        return raw

    def download_blob(self, sha256: str, size: int, destination: Path, label: str) -> Path:
        """The blob ``sha256`` in a new private file in ``destination`` (a directory), verified (``copy_blob``);
        the caller moves it into place. Raises ArtifactRejected, leaving nothing behind."""
        fd, tmp_name = tempfile.mkstemp(prefix=f".{label[:60]}.", suffix=".fetch", dir=destination)
        tmp = Path(tmp_name)
        try:
            with os.fdopen(fd, "wb") as out:
                self.copy_blob(sha256, size, out, label)
            return tmp
        except BaseException:
            with contextlib.suppress(OSError):
                tmp.unlink()
            raise

    def copy_blob(self, sha256: str, size: int, out: BinaryIO, label: str) -> None:
        """Write the blob ``sha256`` to ``out``, verified to be exactly ``size`` bytes with that digest.
        Raises ArtifactRejected for a blob that is missing, larger, shorter or other bytes (what was written
        to ``out`` is then the caller's to throw away)."""
        self.check_cancelled()
        digest = hashlib.sha256()
        received = 0
        try:
            # A local store is read as a plain stream: fsspec's local opener seeks to learn the size, which a
            # blob on a pipe or a slow network mount need not allow.
            path = self.blob_path(sha256)
            source = fileio.open_regular(path) if self.local else self.fs.open(path, "rb")
        except FileNotFoundError:
            raise ArtifactRejected(f"the manifest names {label}, but its blob is not in the store") from None
        with source:
            while True:
                self.check_cancelled()
                chunk = source.read(_CHUNK)
                if not chunk:
                    break
                received += len(chunk)
                if received > size:
                    raise ArtifactRejected(f"{label} is larger in the store than its manifest says")
                digest.update(chunk)
                out.write(chunk)
        if received != size or digest.hexdigest() != sha256:
            raise ArtifactRejected(
                f"{label} does not match its manifest (sha256 {digest.hexdigest()[:16]}..., {received} "
                f"bytes; the manifest says {sha256[:16]}..., {size} bytes)"
            )

    def _store_exists(self) -> bool:
        """The place the URL names is there: the directory (a shared filesystem that is not mounted is not),
        or the bucket of an object store (a prefix exists only once something is published under it)."""
        base = self.root.rsplit("/", 1)[0]
        if self.local:
            return os.path.isdir(base)
        return _exists(self.fs, base.split("/", 1)[0])

    def _write(self, target: str, write: Callable[[str], object]) -> None:
        parent = target.rsplit("/", 1)[0]
        if self.local:
            # A reader on another host must never see half a file: write beside it, then rename.
            self.fs.makedirs(parent, exist_ok=True)
            tmp = f"{parent}/.{target.rsplit('/', 1)[1]}.{os.getpid()}.{threading.get_ident()}.tmp"
            try:
                write(tmp)
                os.chmod(tmp, 0o644)
                os.replace(tmp, target)
            finally:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
        else:
            write(target)


def _document(name: str) -> str:
    """``name`` checked to be a relative path of plain parts (a document never escapes the layout root)."""
    if not fileio.is_safe_relative(name):
        raise ValueError(f"not a document name: {name!r}")
    return name


def _exists(fs: Any, path: str) -> bool:
    return bool(fs.exists(path))


def _size(fs: Any, path: str) -> int | None:
    info = fs.info(path)
    size = info.get("size") if isinstance(info, dict) else None
    return int(size) if isinstance(size, int) else None
