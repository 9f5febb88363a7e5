"""The artifact store: built modules shared between hosts through a store named by URL (fsspec).

Modules are kept as ``v1/modules/<module>/<build fingerprint>-<variant>.json`` manifests over the blobs of
``fleet.store_transport``, published blobs first and manifest last. A fetched file is used only if its size and SHA-256
match and is installed by rename; whoever can write the store can run code on every host that fetches
(docs/fleet.md). Faults raise ``StoreUnavailable`` or ``ArtifactRejected``; a key not there is ``None``.
"""

from __future__ import annotations

import contextlib
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
from typing import TYPE_CHECKING, Any, BinaryIO, TypeVar, cast

from jitguard import fileio
from jitguard.fleet.signing import Trust
from jitguard.fleet.store_transport import (
    ArtifactRejected,
    StoreUnavailable,
    StoreView,
    describe_url,
)
from jitguard.version import __version__

SCHEMA = "jitguard.artifact/1"
LAYOUT = "v1"
MAX_MANIFEST_BYTES = 1024**2
MAX_FILE_BYTES = 16 * 1024**3
_KEY_PART = re.compile(r"[A-Za-z0-9_.+-]{1,120}")  # fullmatch: no trailing newline slips through

if TYPE_CHECKING:
    from jitguard.fleet.signing import Seal

T = TypeVar("T")


@dataclass(frozen=True)
class ArtifactKey:
    """What identifies a built module across hosts: its name, the build identity of the environment
    (``facts.build_identity``) and the variant that was built (a digest of its sources and flags)."""

    module: str
    build_fingerprint: str
    variant: str

    def __post_init__(self) -> None:
        for part in (self.build_fingerprint, self.variant):
            if not _KEY_PART.fullmatch(part):
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
            if not fileio.is_plain_name(name):
                raise ArtifactRejected(f"the manifest names a file {name!r} that is not a plain file name")
            if not isinstance(size, int) or not 0 <= size <= MAX_FILE_BYTES:
                raise ArtifactRejected(f"the manifest gives {name} an impossible size {size!r}")
            if not fileio.is_sha256(digest):
                raise ArtifactRejected(f"the manifest gives {name} no SHA-256 digest")
            files.append(ArtifactFile(name, size, digest))
        if len({f.name for f in files}) != len(files):
            raise ArtifactRejected("the manifest names a file twice")
        created = data.get("created")
        extra = data.get("extra")
        return cls(
            key=key,
            files=tuple(files),
            created=float(created) if fileio.is_time(created) else 0.0,
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
    seal: Seal | None = None  # who signed the manifest (fleet.signing)


def _safe(module: str) -> str:
    cleaned = re.sub(r"[^A-Za-z0-9_.+-]", "_", module)[:100]
    if cleaned != module:
        cleaned += "-" + hashlib.sha256(module.encode()).hexdigest()[:8]
    return cleaned


class ArtifactStore:
    """A store at ``url``; every call runs under ``timeout`` seconds, and none past ``deadline`` (a
    ``time.monotonic()`` value: one bound for a whole restore, however many calls it makes). ``trust`` signs
    the manifests published and checks the ones fetched (``fleet.signing``); None: the one
    JITGUARD_SIGNING_KEY and JITGUARD_TRUSTED_KEYS set, read when first needed."""

    def __init__(
        self, url: str, *, timeout: float = 120.0, deadline: float | None = None, trust: Trust | None = None
    ) -> None:
        if not url or not url.strip():
            raise ValueError("an artifact store needs a URL")
        self.url = url.strip()
        self.timeout = timeout
        self.deadline = deadline
        self._trust = trust
        self._fs: Any = None
        self._root = ""
        self._base = ""

    def __repr__(self) -> str:
        return f"ArtifactStore({describe_url(self.url)!r})"

    # -- public ---------------------------------------------------------------------------------------------

    @property
    def trust(self) -> Trust:
        """How manifests are signed and checked. Raises SigningError for trusted keys that cannot be used."""
        if self._trust is None:
            self._trust = Trust.from_env()
        return self._trust

    def publish(
        self, key: ArtifactKey, files: Mapping[str, Path], extra: Mapping[str, Any] | None = None
    ) -> Manifest:
        """Upload ``files`` (name in the store -> local path) under ``key``: each read once, checked to be this
        host's own (``fileio.PUBLISHED``), and uploaded as it was hashed. Raises StoreUnavailable, or OSError
        (``fileio.FileRefused``) for a file that may not be published."""
        entries = []
        self.trust.signer()  # a signing key that cannot be used fails the publish before any upload
        with contextlib.ExitStack() as stack:
            for name, path in files.items():
                if not fileio.is_plain_name(name):
                    raise ValueError(f"not a plain file name: {name!r}")
                spool = stack.enter_context(tempfile.SpooledTemporaryFile(max_size=8 * 1024**2))
                checked = _read_own(Path(path), spool)
                spool.seek(0)
                entries.append((ArtifactFile(name, checked.size, checked.sha256), cast(BinaryIO, spool)))
            return self._publish(key, entries, extra)

    def _publish(
        self,
        key: ArtifactKey,
        entries: list[tuple[ArtifactFile, BinaryIO]],
        extra: Mapping[str, Any] | None,
    ) -> Manifest:
        manifest = Manifest(
            key=key,
            files=tuple(e for e, _ in entries),
            created=time.time(),
            publisher=socket.gethostname(),
            jitguard_version=__version__,
            extra=dict(extra or {}),
        )

        def upload(view: StoreView) -> Manifest:
            for entry, content in entries:
                if not view.has_blob(entry.sha256, entry.size):
                    view.put_blob(content, entry.sha256)
            body = json.dumps(manifest.to_json(), indent=1, sort_keys=True).encode()
            name = f"modules/{key.manifest_name}"
            view.write_document(name, self.trust.seal(name, body))
            return manifest

        return self.session("publish to", upload)

    def fetch(self, key: ArtifactKey, destination: Path) -> Fetched | None:
        """Fetch the files of ``key`` into ``destination``, verified, each installed by ``link`` once all are in
        hand: a file already there (built here meanwhile) is kept, never replaced. None when the store has no
        such key. Raises StoreUnavailable or ArtifactRejected (then nothing was installed)."""
        destination = Path(destination)
        started = time.monotonic()
        trust = self.trust

        def download(view: StoreView) -> Fetched | None:
            name = f"modules/{key.manifest_name}"
            raw = view.read_document(name, MAX_MANIFEST_BYTES)
            if raw is None:
                return None
            body, seal = trust.open(name, raw)  # SignatureRefused: not signed by a key this host trusts
            try:
                data = json.loads(body)
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
                    with contextlib.suppress(FileExistsError):  # a local file wins over the store's
                        os.link(tmp, final, follow_symlinks=False)
            finally:
                for tmp, _final in staged:
                    with contextlib.suppress(OSError):
                        tmp.unlink()
            total = sum(f.size for f in manifest.files)
            return Fetched(
                manifest, tuple(final for _, final in staged), total, time.monotonic() - started, seal
            )

        return self.session("fetch from", download)

    def session(self, what: str, work: Callable[[StoreView], T]) -> T:
        """``work`` with the store opened, in a thread given up on after ``timeout`` (a store that hangs never
        hangs the caller: StoreUnavailable). Every fault of the backend is StoreUnavailable; ArtifactRejected
        passes through. The primitives for callers that keep their own manifests (warm snapshots)."""

        def opened(cancelled: threading.Event) -> T:
            fs, root = self._open()
            return work(StoreView(self.url, fs, root, cancelled))

        return self._bounded(what, opened)

    # -- internals ------------------------------------------------------------------------------------------

    def _open(self) -> tuple[Any, str]:
        if self._fs is None:
            try:
                import fsspec
            except ImportError as exc:
                raise StoreUnavailable(
                    f"fsspec is not installed ({exc}); pip install fsspec (jitguard's 'share' extra)"
                ) from None
            try:
                fs, root = fsspec.core.url_to_fs(self.url, **_options(self.url, self.timeout))
            except ImportError as exc:
                raise StoreUnavailable(
                    f"no fsspec backend for {describe_url(self.url)} ({exc}); for s3:// pip install s3fs, for gs:// gcsfs (jitguard's 's3' and 'gcs' extras)"
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

        limit = self.timeout
        if self.deadline is not None:
            limit = max(0.0, min(limit, self.deadline - time.monotonic()))
        thread = threading.Thread(target=run, name=f"jitguard-store-{what.split()[0]}", daemon=True)
        thread.start()
        thread.join(limit)
        if thread.is_alive():
            cancelled.set()
            raise StoreUnavailable(
                f"the store {describe_url(self.url)} did not answer within {limit:.3g} s "
                "(JITGUARD_SHARE_TIMEOUT bounds each store call and a whole restore on a host)"
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


def _read_own(path: Path, out: fileio.Sink) -> fileio.CheckedFile:
    """``path`` read once into ``out``: a regular file of this host's own that others cannot write."""
    dir_fd = fileio.open_dir(path.parent)
    try:
        return fileio.read_checked(dir_fd, path.name, fileio.PUBLISHED, out, limit=MAX_FILE_BYTES)
    finally:
        os.close(dir_fd)
