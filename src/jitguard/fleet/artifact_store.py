"""The artifact store: built modules shared between hosts through a store named by URL (fsspec).

One host builds a module and publishes it; every other host with the same build identity and the same
variant fetches it instead of compiling. The URL is anything fsspec opens: ``file:///shared/jitguard`` (a
shared filesystem: fsspec alone), ``s3://bucket/prefix`` (``pip install 'jitguard[s3]'``: s3fs),
``gs://bucket/prefix`` (gcsfs). fsspec and its backends are imported only when a store is used.

Layout under the URL::

    v1/blobs/<sha256>                                      the bytes of one file, named by their digest
    v1/modules/<module>/<build fingerprint>-<variant>.json  the manifest: which files, their sizes and digests

Publishing uploads the blobs first and the manifest last, so a manifest is only ever seen complete (on a
local filesystem each file is written under a temporary name and renamed; an object store's PUT is atomic).

**Trust.** A fetched file is used only if its size and SHA-256 match the manifest, and it is installed by
rename, so a torn upload, a truncated download or a corrupted blob is never loaded. The manifest comes from
the store itself, though: whoever can write the store can publish a manifest and a matching library, and a
fetched library is loaded into every process that uses it. Anyone who can write the store can run code on
every host that fetches from it; give write access to the build hosts only (docs/fleet.md).

**Fail-safe.** Every operation runs under a deadline (``timeout``): a store that does not answer (a hung
network filesystem, an unreachable endpoint) is given up on, never waited for. Faults raise ``StoreUnavailable``
(no store, no fsspec, no answer) or ``ArtifactRejected`` (a manifest or file that does not check out); the
callers (``fleet.module_share``) turn both into one warning and a local build. A key that is simply not in
the store is a miss (``None``), which is normal for the first host.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import re
import socket
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, TypeVar

from jitguard import __version__

SCHEMA = "jitguard.artifact/1"
LAYOUT = "v1"
MAX_MANIFEST_BYTES = 1024**2
MAX_FILE_BYTES = 16 * 1024**3
_CHUNK = 4 * 1024**2
_NAME = re.compile(r"^[A-Za-z0-9_.+-]{1,200}$")
_KEY_PART = re.compile(r"^[A-Za-z0-9_.+-]{1,120}$")
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_LOCAL_PROTOCOLS = ("file", "local")

T = TypeVar("T")


class StoreUnavailable(Exception):
    """The store could not be used: not installed (fsspec / s3fs), not there, or no answer in time."""


class ArtifactRejected(Exception):
    """What the store holds for a key does not check out (malformed manifest, wrong size or digest)."""


@dataclass(frozen=True)
class ArtifactKey:
    """What identifies a built module across hosts: its name, the build identity of the environment
    (``facts.build_identity``) and the variant that was built (a digest of its sources and flags)."""

    module: str
    build_fingerprint: str
    variant: str

    def __post_init__(self) -> None:
        for part in (self.build_fingerprint, self.variant):
            if not _KEY_PART.match(part):
                raise ValueError(f"not a key part: {part!r}")
        if not self.module or "/" in self.module or self.module in (".", ".."):
            raise ValueError(f"not a module name: {self.module!r}")

    @property
    def manifest_name(self) -> str:
        return f"{_safe(self.module)}/{self.build_fingerprint}-{self.variant}.json"


@dataclass(frozen=True)
class ArtifactFile:
    name: str
    size: int
    sha256: str

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "size": self.size, "sha256": self.sha256}


@dataclass(frozen=True)
class Manifest:
    key: ArtifactKey
    files: tuple[ArtifactFile, ...]
    created: float
    publisher: str
    jitguard_version: str
    extra: Mapping[str, Any]

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA,
            "module": self.key.module,
            "build_fingerprint": self.key.build_fingerprint,
            "variant": self.key.variant,
            "files": [f.to_json() for f in self.files],
            "created": self.created,
            "publisher": self.publisher,
            "jitguard": self.jitguard_version,
            "extra": dict(self.extra),
        }

    @classmethod
    def from_json(cls, data: Any, key: ArtifactKey) -> Manifest:
        """Raises ArtifactRejected for anything malformed or for another key."""
        if not isinstance(data, dict) or data.get("schema") != SCHEMA:
            raise ArtifactRejected(
                "the manifest is not a jitguard artifact manifest (schema jitguard.artifact/1)"
            )
        found = (data.get("module"), data.get("build_fingerprint"), data.get("variant"))
        if found != (key.module, key.build_fingerprint, key.variant):
            raise ArtifactRejected(f"the manifest is for another module or build: {found}")
        files = []
        raw_files = data.get("files")
        if not isinstance(raw_files, list) or not raw_files:
            raise ArtifactRejected("the manifest lists no files")
        for entry in raw_files:
            if not isinstance(entry, dict):
                raise ArtifactRejected("a file entry of the manifest is not an object")
            name, size, digest = entry.get("name"), entry.get("size"), entry.get("sha256")
            if not isinstance(name, str) or not _NAME.match(name) or name in (".", ".."):
                raise ArtifactRejected(f"the manifest names a file {name!r} that is not a plain file name")
            if not isinstance(size, int) or not 0 <= size <= MAX_FILE_BYTES:
                raise ArtifactRejected(f"the manifest gives {name} an impossible size {size!r}")
            if not isinstance(digest, str) or not _SHA256.match(digest):
                raise ArtifactRejected(f"the manifest gives {name} no SHA-256 digest")
            files.append(ArtifactFile(name, size, digest))
        if len({f.name for f in files}) != len(files):
            raise ArtifactRejected("the manifest names a file twice")
        created = data.get("created")
        extra = data.get("extra")
        return cls(
            key=key,
            files=tuple(files),
            created=float(created) if isinstance(created, (int, float)) else 0.0,
            publisher=str(data.get("publisher", "")),
            jitguard_version=str(data.get("jitguard", "")),
            extra=extra if isinstance(extra, dict) else {},
        )


@dataclass(frozen=True)
class Fetched:
    """Files fetched, verified and installed."""

    manifest: Manifest
    paths: tuple[Path, ...]
    bytes: int
    seconds: float


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(_CHUNK), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _safe(module: str) -> str:
    cleaned = re.sub(r"[^A-Za-z0-9_.+-]", "_", module)[:100]
    if cleaned != module:
        cleaned += "-" + hashlib.sha256(module.encode()).hexdigest()[:8]
    return cleaned


def describe_url(url: str) -> str:
    """The URL without credentials (``s3://key:secret@bucket`` never reaches a log line)."""
    return re.sub(r"^([a-z0-9+.-]+://)[^/@]*@", r"\1<redacted>@", url, flags=re.IGNORECASE)


class ArtifactStore:
    """A store at ``url``; every call runs under ``timeout`` seconds."""

    def __init__(self, url: str, *, timeout: float = 120.0) -> None:
        if not url or not url.strip():
            raise ValueError("an artifact store needs a URL")
        self.url = url.strip()
        self.timeout = timeout
        self._fs: Any = None
        self._root = ""
        self._base = ""

    def __repr__(self) -> str:
        return f"ArtifactStore({describe_url(self.url)!r})"

    # -- public ---------------------------------------------------------------------------------------------

    def publish(
        self, key: ArtifactKey, files: Mapping[str, Path], extra: Mapping[str, Any] | None = None
    ) -> Manifest:
        """Upload ``files`` (name in the store -> local path) under ``key``. Raises StoreUnavailable."""
        entries = []
        for name, path in files.items():
            if not _NAME.match(name):
                raise ValueError(f"not a plain file name: {name!r}")
            entries.append((ArtifactFile(name, Path(path).stat().st_size, sha256_of(Path(path))), Path(path)))
        manifest = Manifest(
            key=key,
            files=tuple(e for e, _ in entries),
            created=time.time(),
            publisher=socket.gethostname(),
            jitguard_version=__version__,
            extra=dict(extra or {}),
        )

        def upload(view: StoreView) -> Manifest:
            for entry, path in entries:
                if not view.has_blob(entry.sha256, entry.size, rewrite_remote=True):
                    view.put_blob(path, entry.sha256)
            body = json.dumps(manifest.to_json(), indent=1, sort_keys=True).encode()
            view.write_document(f"modules/{key.manifest_name}", body)
            return manifest

        return self.session("publish to", upload)

    def fetch(self, key: ArtifactKey, destination: Path) -> Fetched | None:
        """Fetch the files of ``key`` into ``destination``, verified, each installed by rename. None when the
        store has no such key. Raises StoreUnavailable or ArtifactRejected (then nothing was installed)."""
        destination = Path(destination)
        started = time.monotonic()

        def download(view: StoreView) -> Fetched | None:
            raw = view.read_document(f"modules/{key.manifest_name}", MAX_MANIFEST_BYTES)
            if raw is None:
                return None
            try:
                data = json.loads(raw)
            except ValueError as exc:
                raise ArtifactRejected(f"the manifest is not JSON: {exc}") from None
            manifest = Manifest.from_json(data, key)
            destination.mkdir(parents=True, exist_ok=True)
            staged: list[tuple[Path, Path]] = []
            try:
                for entry in manifest.files:
                    tmp = view.download_blob(entry.sha256, entry.size, destination, entry.name)
                    os.chmod(tmp, 0o755)
                    staged.append((tmp, destination / entry.name))
                view.check_cancelled()
                for tmp, final in staged:
                    os.replace(tmp, final)
            finally:
                for tmp, _final in staged:
                    with contextlib.suppress(OSError):
                        tmp.unlink()
            total = sum(f.size for f in manifest.files)
            return Fetched(manifest, tuple(final for _, final in staged), total, time.monotonic() - started)

        return self.session("fetch from", download)

    def session(self, what: str, work: Callable[[StoreView], T]) -> T:
        """``work`` with the store opened, in a thread given up on after ``timeout`` (a store that hangs never
        hangs the caller: StoreUnavailable). Every fault of the backend is StoreUnavailable; ArtifactRejected
        passes through. The primitives for callers that keep their own manifests (warm snapshots)."""

        def opened(cancelled: threading.Event) -> T:
            fs, root = self._open()
            return work(StoreView(self, fs, root, cancelled))

        return self._bounded(what, opened)

    # -- internals ------------------------------------------------------------------------------------------

    def _open(self) -> tuple[Any, str]:
        if self._fs is None:
            try:
                import fsspec
            except ImportError as exc:
                raise StoreUnavailable(
                    f"fsspec is not installed ({exc}); pip install 'jitguard[share]'"
                ) from None
            try:
                fs, root = fsspec.core.url_to_fs(self.url, **_options(self.url, self.timeout))
            except ImportError as exc:
                raise StoreUnavailable(
                    f"no fsspec backend for {describe_url(self.url)} ({exc}); for s3:// pip install 'jitguard[s3]'"
                ) from None
            except (ValueError, OSError) as exc:
                raise StoreUnavailable(f"cannot open {describe_url(self.url)}: {exc}") from None
            self._base = str(root).rstrip("/")
            self._fs, self._root = fs, f"{self._base}/{LAYOUT}"
        return self._fs, self._root

    def _bounded(self, what: str, work: Callable[[threading.Event], T]) -> T:
        """``work`` in a thread, given up on after ``timeout``: a store that hangs never hangs the caller."""
        cancelled = threading.Event()
        outcome: list[Any] = []

        def run() -> None:
            try:
                outcome.append((True, work(cancelled)))
            except BaseException as exc:  # handed to the caller's thread
                outcome.append((False, exc))

        thread = threading.Thread(target=run, name=f"jitguard-store-{what.split()[0]}", daemon=True)
        thread.start()
        thread.join(self.timeout)
        if thread.is_alive():
            cancelled.set()
            raise StoreUnavailable(
                f"the store {describe_url(self.url)} did not answer within {self.timeout:g} s "
                "(JITGUARD_SHARE_TIMEOUT)"
            )
        ok, value = outcome[0]
        if ok:
            return value
        if isinstance(value, (StoreUnavailable, ArtifactRejected)):
            raise value
        if isinstance(value, (PermissionError,)):
            raise StoreUnavailable(f"cannot {what} {describe_url(self.url)}: permission denied ({value})")
        if isinstance(value, Exception):
            # fsspec backends raise their own kinds (botocore, aiohttp, OSError): all mean "cannot use it".
            raise StoreUnavailable(f"cannot {what} {describe_url(self.url)}: {type(value).__name__}: {value}")
        raise value


class StoreView:
    """The store opened inside one ``ArtifactStore.session``: content-addressed blobs and named documents
    (manifests) under the layout root. Every call checks the session's cancel flag first."""

    def __init__(self, store: ArtifactStore, fs: Any, root: str, cancelled: threading.Event) -> None:
        self.store = store
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
        if not _SHA256.match(sha256):
            raise ValueError(f"not a SHA-256 digest: {sha256!r}")
        return f"{self.root}/blobs/{sha256}"

    def has_blob(self, sha256: str, size: int, *, rewrite_remote: bool = False) -> bool:
        """These very bytes are in the store already. On a local filesystem the blob is hashed; on an object
        store its size is compared (a PUT is atomic, and every reader verifies), or, with ``rewrite_remote``,
        it is always rewritten."""
        self.check_cancelled()
        path = self.blob_path(sha256)
        if self.local:
            return _exists(self.fs, path) and sha256_of(Path(path)) == sha256
        if rewrite_remote:
            return False
        try:
            return _size(self.fs, path) == size
        except FileNotFoundError:
            return False

    def put_blob(self, source: Path, sha256: str) -> None:
        self.check_cancelled()
        self._write(self.blob_path(sha256), functools.partial(_put, self.fs, source))

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
                raise StoreUnavailable(f"there is no store at {describe_url(self.store.url)}") from None
            return None
        if size is not None and size > limit:
            raise ArtifactRejected(f"{name} is {size} bytes, more than it can be ({limit})")
        try:
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
            source = open(path, "rb") if self.local else self.fs.open(path, "rb")  # noqa: SIM115
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
    parts = name.split("/")
    if not parts or any(not _NAME.match(part) or part in (".", "..") for part in parts):
        raise ValueError(f"not a document name: {name!r}")
    return name


def _options(url: str, timeout: float) -> dict[str, Any]:
    """Connection bounds for the object stores (their defaults retry for minutes)."""
    scheme = url.split("://", 1)[0].lower() if "://" in url else "file"
    bound = max(1.0, min(timeout, 30.0))
    if scheme in ("s3", "s3a"):
        return {
            "config_kwargs": {
                "connect_timeout": bound,
                "read_timeout": bound,
                "retries": {"max_attempts": 2, "mode": "standard"},
            }
        }
    if scheme in ("gs", "gcs"):
        return {"timeout": bound}
    return {}


def _put(fs: Any, local: Path, target: str) -> None:
    fs.put_file(str(local), target)


def _exists(fs: Any, path: str) -> bool:
    return bool(fs.exists(path))


def _size(fs: Any, path: str) -> int | None:
    info = fs.info(path)
    size = info.get("size") if isinstance(info, dict) else None
    return int(size) if isinstance(size, int) else None
