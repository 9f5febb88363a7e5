"""Save an engine start's JIT caches to the artifact store, and restore them on a new host before the engine
needs them.

Store layout (beside the modules of ``fleet.artifact_store``, sharing its blobs)::

    v1/blobs/<sha256>                                   one file's bytes: a file in two snapshots is stored once
    v1/warm/<stack digest>/<arch>/<name>.json           the snapshot manifest (``fleet.snapshot``)

``save`` scans the layers, uploads the blobs the store lacks, then the manifest (last: a manifest is only ever
seen complete). ``restore`` fetches the manifest for this stack, arch and name, refuses one for anything else,
downloads every blob it needs into a private file beside its target, verifies size and sha256, and only when
all of them are in hand lands them: each by ``link`` (never replacing anything, so a file the engine wrote in
the meantime, or a different local entry, is kept), the directories walked without following a link, Triton's
group files last (rewritten for this host's root) so Triton never sees a group before its kernels. A store
that fails, hangs (``timeout``) or holds something that does not check out raises ``WarmUnavailable`` or
``SnapshotRejected`` before anything landed; the engine then compiles as it would without jitguard.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import secrets
import socket
import stat
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from jitguard import __version__
from jitguard.facts.jit_caches import CacheLayer
from jitguard.fleet.artifact_store import ArtifactRejected, ArtifactStore, StoreUnavailable, StoreView
from jitguard.fleet.signing import SignatureRefused
from jitguard.fleet.snapshot import (
    MAX_MANIFEST_BYTES,
    TRITON_GROUP,
    Snapshot,
    SnapshotFile,
    SnapshotRejected,
    StackKey,
    is_safe_relative,
    relocate_triton_group,
    scan,
)

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
_DIR_MODE = 0o755


class WarmUnavailable(Exception):
    """The store could not be used (missing, unreachable, no answer in time) or refused what it holds."""


def manifest_name(stack: StackKey, name: str) -> str:
    if not is_safe_relative(name) or "/" in name:
        raise ValueError(f"not a snapshot name: {name!r} (letters, digits, '._-')")
    return f"warm/{stack.digest}/{stack.arch}/{name}.json"


@dataclass(frozen=True)
class Saved:
    snapshot: Snapshot
    uploaded_files: int
    uploaded_bytes: int
    seconds: float


@dataclass
class Restored:
    """What one restore did. ``landed``: files written; ``present``: already here with the same bytes;
    ``kept_local``: here with other bytes (kept); ``refused``: not written, with why (a link in the way, a
    directory jitguard will not write into)."""

    snapshot: Snapshot
    landed: int = 0
    present: int = 0
    kept_local: int = 0
    fetched_bytes: int = 0
    seconds: float = 0.0
    refused: dict[str, int] = field(default_factory=dict)

    def refuse(self, why: str) -> None:
        self.refused[why] = self.refused.get(why, 0) + 1


def save(store: ArtifactStore, stack: StackKey, name: str, layers: tuple[CacheLayer, ...]) -> Saved:
    """Scan ``layers`` and publish them as snapshot ``name``. Raises WarmUnavailable."""
    started = time.monotonic()
    files, roots, skipped = scan(layers)
    snapshot = Snapshot(
        stack=stack,
        name=name,
        roots=roots,
        files=tuple(files),
        created=time.time(),
        publisher=socket.gethostname(),
        jitguard_version=__version__,
        skipped=skipped,
    )
    paths = {cache.name: Path(roots[cache.name]) for cache in layers}

    def upload(view: StoreView) -> tuple[int, int]:
        count = size = 0
        done: set[str] = set()
        for entry in snapshot.files:
            if entry.sha256 in done:
                continue
            done.add(entry.sha256)
            if view.has_blob(entry.sha256, entry.size):
                continue
            source = paths[entry.layer] / entry.path
            view.put_blob(_verified_copy_source(source, entry), entry.sha256)
            count, size = count + 1, size + entry.size
        body = json.dumps(snapshot.to_json(), sort_keys=True, separators=(",", ":")).encode()
        document = manifest_name(stack, name)
        view.write_document(document, store.trust.seal(document, body))  # signed: fleet.signing
        return count, size

    try:
        count, size = store.session("save a warm snapshot to", upload)
    except (StoreUnavailable, ArtifactRejected, OSError) as exc:
        raise WarmUnavailable(str(exc) or type(exc).__name__) from None
    return Saved(snapshot, count, size, time.monotonic() - started)


def _verified_copy_source(path: Path, entry: SnapshotFile) -> Path:
    """``path`` when it still holds the bytes scanned (a cache file rewritten since is not uploaded under a
    digest it no longer has)."""
    digest = hashlib.sha256()
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    try:
        while chunk := os.read(fd, 4 * 1024**2):
            digest.update(chunk)
    finally:
        os.close(fd)
    if digest.hexdigest() != entry.sha256:
        raise OSError(errno.EAGAIN, f"{path} changed while the snapshot was saved; save again")
    return path


def fetch_manifest(store: ArtifactStore, stack: StackKey, name: str) -> tuple[Snapshot, str] | None:
    """The snapshot ``name`` for this stack and its manifest's sha256, None when the store has none; its
    ``signature`` says who signed it. Raises WarmUnavailable, SnapshotRejected or SignatureRefused (not
    signed by a key this host trusts: ``fleet.signing``)."""

    def read(view: StoreView) -> bytes | None:
        return view.read_document(manifest_name(stack, name), MAX_MANIFEST_BYTES)

    try:
        raw = store.session("read a warm snapshot from", read)
    except (StoreUnavailable, ArtifactRejected) as exc:
        raise WarmUnavailable(str(exc) or type(exc).__name__) from None
    if raw is None:
        return None
    try:
        body, seal = store.trust.open(manifest_name(stack, name), raw)
    except SignatureRefused:
        raise
    except ArtifactRejected as exc:  # a signed document that is damaged
        raise SnapshotRejected(str(exc)) from None
    try:
        data = json.loads(body)
    except (ValueError, RecursionError):
        raise SnapshotRejected("the manifest is not JSON (truncated or damaged)") from None
    snapshot = replace(Snapshot.from_json(data, stack, name), signature=seal)
    return snapshot, hashlib.sha256(raw).hexdigest()


def restore(
    store: ArtifactStore,
    snapshot: Snapshot,
    layers: tuple[CacheLayer, ...],
    *,
    progress: Callable[[int, int], None] | None = None,
) -> Restored:
    """Land ``snapshot``'s files of ``layers`` on this host (see the module docstring). Raises
    WarmUnavailable (nothing landed) when the store fails or a blob does not check out."""
    started = time.monotonic()
    result = Restored(snapshot)
    roots = {cache.name: Path(os.path.abspath(os.path.expanduser(cache.root))) for cache in layers}
    wanted = [f for f in snapshot.files if f.layer in roots]
    todo: list[SnapshotFile] = []
    for entry in wanted:
        state = _local_state(roots[entry.layer], entry)
        if state == "same":
            result.present += 1
        elif state == "other":
            result.kept_local += 1
        elif state == "missing":
            todo.append(entry)
        else:
            result.refuse(state)
    todo.sort(key=lambda f: f.relocate == TRITON_GROUP)  # groups land after the kernels they name

    def fetch_then_land(view: StoreView) -> None:
        # Everything this thread opens it also closes: a restore given up on (timeout) never has its
        # descriptors or temporary files touched by the caller's thread.
        staged: list[tuple[SnapshotFile, int, str]] = []  # entry, parent dir fd, temp name
        try:
            for done, entry in enumerate(todo):
                parent = _open_parent(roots[entry.layer], entry.path, create=True)
                if isinstance(parent, str):
                    result.refuse(parent)
                    continue
                staged.append((entry, parent, _fetch_beside(view, entry, parent)))
                result.fetched_bytes += entry.size
                if progress is not None:
                    progress(done + 1, len(todo))
            for entry, parent, tmp in staged:
                view.check_cancelled()
                _land(
                    entry, parent, tmp, snapshot.roots.get(entry.layer, ""), str(roots[entry.layer]), result
                )
        finally:
            for _entry, parent, tmp in staged:
                with contextlib.suppress(OSError):
                    os.unlink(tmp, dir_fd=parent)
                with contextlib.suppress(OSError):
                    os.close(parent)

    if todo:
        try:
            store.session("restore a warm snapshot from", fetch_then_land)
        except (StoreUnavailable, ArtifactRejected) as exc:
            raise WarmUnavailable(str(exc) or type(exc).__name__) from None
    result.seconds = time.monotonic() - started
    return result


def _fetch_beside(view: StoreView, entry: SnapshotFile, parent: int) -> str:
    """The verified blob of ``entry`` in a new private file in the directory ``parent``; its name."""
    tmp = f".{entry.path.rsplit('/', 1)[-1][:60]}.{secrets.token_hex(6)}.fetch"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600, dir_fd=parent)
    try:
        with os.fdopen(fd, "wb") as out:
            view.copy_blob(entry.sha256, entry.size, out, f"{entry.layer}/{entry.path}")
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp, dir_fd=parent)
        raise
    return tmp


def _land(entry: SnapshotFile, parent: int, tmp: str, old_root: str, new_root: str, result: Restored) -> None:
    name = entry.path.rsplit("/", 1)[-1]
    if entry.relocate == TRITON_GROUP and old_root != new_root:
        fd = os.open(tmp, os.O_RDONLY | os.O_NOFOLLOW, dir_fd=parent)
        with os.fdopen(fd, "rb") as handle:
            data = relocate_triton_group(handle.read(), old_root, new_root)
        fd = os.open(tmp, os.O_WRONLY | os.O_TRUNC | os.O_NOFOLLOW, dir_fd=parent)
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
    os.chmod(tmp, entry.mode, dir_fd=parent)
    try:
        os.link(tmp, name, src_dir_fd=parent, dst_dir_fd=parent, follow_symlinks=False)
    except FileExistsError:
        result.kept_local += 1  # written meanwhile (the engine, another restorer): kept
        return
    except OSError as exc:
        result.refuse(f"cannot write ({exc.strerror or exc})")
        return
    result.landed += 1


def _local_state(root: Path, entry: SnapshotFile) -> str:
    """'missing', 'same' (these bytes are here), 'other' (other bytes: kept), or why it will not be written."""
    parent = _open_parent(root, entry.path, create=False)
    if parent == "missing":
        return "missing"
    if isinstance(parent, str):
        return parent
    try:
        try:
            # O_NONBLOCK: a named pipe planted where a cache file belongs must not hang the engine's start.
            flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK
            fd = os.open(entry.path.rsplit("/", 1)[-1], flags, dir_fd=parent)
        except FileNotFoundError:
            return "missing"
        except OSError as exc:
            return "a link in the way" if exc.errno == errno.ELOOP else f"unreadable ({exc.strerror})"
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                return "not a regular file in the way"
            if st.st_size != entry.size:
                return "other"
            digest = hashlib.sha256()
            while chunk := os.read(fd, 4 * 1024**2):
                digest.update(chunk)
            return "same" if digest.hexdigest() == entry.sha256 or entry.relocate else "other"
        finally:
            os.close(fd)
    finally:
        os.close(parent)


def _open_parent(root: Path, relative: str, *, create: bool) -> int | str:
    """A descriptor of the directory holding ``root/relative``, every level below ``root`` opened without
    following a link (``root`` itself is the user's choice and may be one). A string says why not: 'missing'
    (not there and ``create`` is off), 'a link in the way', 'a directory others can write', or an OS error."""
    parts = relative.split("/")[:-1]
    try:
        if create:
            os.makedirs(root, mode=_DIR_MODE, exist_ok=True)
        fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        return "missing"
    except OSError as exc:
        return f"cannot open the cache root ({exc.strerror or exc})"
    try:
        for part in parts:
            if create:
                with contextlib.suppress(FileExistsError):
                    os.mkdir(part, _DIR_MODE, dir_fd=fd)
            try:
                child = os.open(part, _DIR_FLAGS, dir_fd=fd)
            except FileNotFoundError:
                os.close(fd)
                return "missing"
            except OSError as exc:
                os.close(fd)
                if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                    return "a link in the way"
                return f"cannot open a directory ({exc.strerror or exc})"
            os.close(fd)
            fd = child
            st = os.fstat(fd)
            if st.st_uid != os.geteuid() or st.st_mode & 0o022:
                os.close(fd)
                return "a directory of another user or that others can write"
        return fd
    except OSError as exc:
        os.close(fd)
        return f"cannot write ({exc.strerror or exc})"
