"""Save an engine start's JIT caches to the artifact store, and restore them on a new host before the engine
needs them.

``save`` publishes only this host's own files, each opened once and uploaded as hashed, the manifest
(``v1/warm/<stack>/<arch>/<name>.json``) last. ``restore`` lands each file verified, by ``link``: a bad blob
costs its file, a full disk rolls its layer back, a store that fails raises ``WarmUnavailable`` (docs/fleet.md).
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import io
import itertools
import json
import os
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import BinaryIO

from jitguard import fileio
from jitguard.facts.jit_caches import CacheLayer
from jitguard.fleet.artifact_store import ArtifactStore
from jitguard.fleet.signing import SignatureRefused
from jitguard.fleet.snapshot import (
    MAX_MANIFEST_BYTES,
    TRITON_GROUP,
    LeftOut,
    Snapshot,
    SnapshotFile,
    SnapshotRejected,
    StackKey,
    layer_root,
    read_layer,
    relocate_triton_group,
)
from jitguard.fleet.store_transport import ArtifactRejected, StoreUnavailable, StoreView
from jitguard.version import __version__

_DIR_MODE = 0o700
_FETCH = ".fetch"
_MAX_GROUP_BYTES = 16 * 1024**2
_DISK_FULL = (errno.ENOSPC, errno.EDQUOT)


class WarmUnavailable(Exception):
    """The store could not be used (missing, unreachable, no answer in time) or refused what it holds."""


class NothingToSave(Exception):
    """A save found no file this host may publish; the text says what was left out and why."""


def manifest_name(stack: StackKey, name: str) -> str:
    if not fileio.is_plain_name(name):
        raise ValueError(f"not a snapshot name: {name!r} (letters, digits, '._-')")
    return f"warm/{stack.digest}/{stack.arch}/{name}.json"


@dataclass(frozen=True)
class Saved:
    snapshot: Snapshot
    uploaded_files: int
    uploaded_bytes: int
    seconds: float
    left_out: LeftOut = field(default_factory=LeftOut)


@dataclass
class Restored:
    """What one restore did. ``landed``: files written; ``present``: already here with the same bytes;
    ``kept_local``: here with other bytes (kept); ``refused``: not written, why -> count (a link in the way, a
    directory jitguard will not write into); ``integrity``: files whose blob failed its digest (skipped);
    ``absent_layers``: layers rolled back, with why (a full disk)."""

    snapshot: Snapshot
    landed: int = 0
    present: int = 0
    kept_local: int = 0
    fetched_bytes: int = 0
    seconds: float = 0.0
    swept: int = 0
    refused: dict[str, int] = field(default_factory=dict)
    integrity: list[str] = field(default_factory=list)
    absent_layers: dict[str, str] = field(default_factory=dict)

    def refuse(self, why: str, count: int = 1) -> None:
        self.refused[why] = self.refused.get(why, 0) + count

    @property
    def complete(self) -> bool:
        """Every file of the snapshot's layers is here now (landed, present, or kept as it was here)."""
        return not (self.refused or self.integrity or self.absent_layers)


def save(store: ArtifactStore, stack: StackKey, name: str, layers: tuple[CacheLayer, ...]) -> Saved:
    """Publish ``layers`` as snapshot ``name``: every file this host may publish, read once and uploaded as
    read. Raises WarmUnavailable, or NothingToSave when no file qualifies."""
    started = time.monotonic()
    left_out = LeftOut()
    store.trust.signer()  # a signing key that cannot be used fails the save before any upload

    def upload(view: StoreView) -> tuple[Snapshot, int, int]:
        count = size = 0
        done: set[str] = set()
        files: list[SnapshotFile] = []
        roots: dict[str, str] = {}
        for cache in layers:
            roots[cache.name] = str(layer_root(cache))
            for entry, content in read_layer(cache, left_out):
                with content:
                    files.append(entry)
                    if entry.sha256 in done:
                        continue
                    done.add(entry.sha256)
                    if view.has_blob(entry.sha256, entry.size):
                        continue
                    view.put_blob(content, entry.sha256)
                    count, size = count + 1, size + entry.size
        if not files:
            raise NothingToSave(
                "no file here may be published"
                + (f": left out {left_out.describe()}" if left_out.counts else " (every cache is empty)")
            )
        snapshot = Snapshot(
            stack=stack,
            name=name,
            roots=roots,
            files=tuple(files),
            created=time.time(),
            publisher=socket.gethostname(),
            jitguard_version=__version__,
            skipped=dict(left_out.counts),
        )
        body = json.dumps(snapshot.to_json(), sort_keys=True, separators=(",", ":")).encode()
        document = manifest_name(stack, name)
        view.write_document(document, store.trust.seal(document, body))  # signed: fleet.signing
        return snapshot, count, size

    try:
        snapshot, count, size = store.session("save a warm snapshot to", upload)
    except (StoreUnavailable, ArtifactRejected, OSError) as exc:
        raise WarmUnavailable(str(exc) or type(exc).__name__) from None
    return Saved(snapshot, count, size, time.monotonic() - started, left_out)


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
    WarmUnavailable when the store fails or hangs; what landed before is verified and complete."""
    started = time.monotonic()
    result = Restored(snapshot)
    roots: dict[str, Path] = {}
    for cache in layers:
        real, reasons = fileio.trusted_root(layer_root(cache), fileio.PUBLISHED)
        count = sum(1 for f in snapshot.files if f.layer == cache.name)
        if reasons:
            result.refuse(f"cache root not trusted ({reasons[0]})", count)
        elif count:
            roots[cache.name] = real
    # By layer and directory, one directory open at a time; Triton's groups after the kernels they name.
    wanted = sorted(
        (f for f in snapshot.files if f.layer in roots),
        key=lambda f: (f.relocate == TRITON_GROUP, f.layer, f.path.rpartition("/")[0], f.path),
    )

    def land_all(view: StoreView) -> None:
        landed: dict[str, list[tuple[str, str, int]]] = {}  # layer -> (directory, name, inode) written
        done = 0
        for (_group, layer, directory), entries in itertools.groupby(
            wanted, key=lambda f: (f.relocate == TRITON_GROUP, f.layer, f.path.rpartition("/")[0])
        ):
            batch = list(entries)
            if layer in result.absent_layers:
                continue
            try:
                _land_directory(view, roots[layer], directory, batch, snapshot, result, landed)
            except OSError as exc:
                if exc.errno not in _DISK_FULL:
                    raise
                _roll_back(roots[layer], landed.pop(layer, []), result)
                count = sum(1 for f in snapshot.files if f.layer == layer)
                result.absent_layers[layer] = f"{exc.strerror or 'no space left'}: rolled back, {count} files"
            done += len(batch)
            if progress is not None:
                progress(done, len(wanted))

    if wanted:
        try:
            store.session("restore a warm snapshot from", land_all)
        except (StoreUnavailable, ArtifactRejected) as exc:
            raise WarmUnavailable(str(exc) or type(exc).__name__) from None
        except OSError as exc:
            raise WarmUnavailable(f"cannot write the caches here ({exc.strerror or exc})") from None
    result.seconds = time.monotonic() - started
    return result


def _land_directory(
    view: StoreView,
    root: Path,
    directory: str,
    entries: list[SnapshotFile],
    snapshot: Snapshot,
    result: Restored,
    landed: dict[str, list[tuple[str, str, int]]],
) -> None:
    """Land ``entries`` (files of one directory of one layer). OSError only for a full disk."""
    parent = _open_parent(root, directory, create=True)
    if isinstance(parent, str):
        result.refuse(parent, len(entries))
        return
    try:
        result.swept += fileio.sweep_dead_temps(parent, _FETCH)
        for entry in entries:
            view.check_cancelled()
            name = entry.path.rpartition("/")[2]
            state = _local_state(parent, name, entry)
            if state == "same":
                result.present += 1
                continue
            if state == "other":
                result.kept_local += 1
                continue
            if state != "missing":
                result.refuse(state)
                continue
            if entry.relocate == TRITON_GROUP:
                data = _group_for_here(view, entry, snapshot.roots.get(entry.layer, ""), str(root))
                if data is None:
                    result.integrity.append(f"{entry.layer}/{entry.path}")
                    continue
                missing = _missing_children(data)
                if missing:
                    result.refuse("a Triton group whose kernels are not all here")
                    continue
                outcome = _land_bytes(parent, name, entry.mode, _writer_of_bytes(data))
            else:
                label = f"{entry.layer}/{entry.path}"
                try:
                    outcome = _land_bytes(parent, name, entry.mode, _writer_of_blob(view, entry, label))
                except ArtifactRejected:
                    result.integrity.append(label)
                    continue
                result.fetched_bytes += entry.size
            if isinstance(outcome, int):
                result.landed += 1
                landed.setdefault(entry.layer, []).append((directory, name, outcome))
            elif outcome == "exists":
                result.kept_local += 1  # written meanwhile (the engine, another restorer): kept
            else:
                result.refuse(outcome)
    finally:
        os.close(parent)


def _writer_of_bytes(data: bytes) -> Callable[[BinaryIO], object]:
    def write(out: BinaryIO) -> object:
        return out.write(data)

    return write


def _writer_of_blob(view: StoreView, entry: SnapshotFile, label: str) -> Callable[[BinaryIO], object]:
    def write(out: BinaryIO) -> object:
        view.copy_blob(entry.sha256, entry.size, out, label)
        return None

    return write


def _group_for_here(view: StoreView, entry: SnapshotFile, old_root: str, new_root: str) -> bytes | None:
    """A Triton group's verified bytes, rewritten for this host's root; None when its blob fails its digest."""
    buffer = io.BytesIO()
    try:
        view.copy_blob(entry.sha256, min(entry.size, _MAX_GROUP_BYTES), buffer, f"{entry.layer}/{entry.path}")
    except ArtifactRejected:
        return None
    return relocate_triton_group(buffer.getvalue(), old_root, new_root)


def _missing_children(group: bytes) -> list[str]:
    """The kernel files a Triton group names that are not regular files here (the group would point at
    nothing; Triton then compiles, but a group must never land before its kernels)."""
    try:
        children = json.loads(group).get("child_paths", {})
    except (ValueError, AttributeError):
        return []
    missing = []
    for target in children.values() if isinstance(children, dict) else ():
        try:
            if not isinstance(target, str) or not fileio.is_regular(target):
                missing.append(str(target))
        except OSError:
            missing.append(str(target))
    return missing


def _land_bytes(parent: int, name: str, mode: int, write: Callable[[BinaryIO], object]) -> int | str:
    """Write a new private file beside ``name``, give it ``mode`` and link it into place (never replacing
    anything): its inode, 'exists' when something is there now, or why not. ArtifactRejected passes through;
    OSError only for a full disk."""
    temp, fd = fileio.new_temp(parent, name, _FETCH)
    try:
        with os.fdopen(fd, "wb") as out:
            write(out)
            out.flush()
            os.fchmod(out.fileno(), mode)
            inode = os.fstat(out.fileno()).st_ino
        os.link(temp, name, src_dir_fd=parent, dst_dir_fd=parent, follow_symlinks=False)
        return inode
    except FileExistsError:
        return "exists"
    except OSError as exc:
        if exc.errno in _DISK_FULL:
            raise
        return f"cannot write ({exc.strerror or exc})"
    finally:
        with contextlib.suppress(OSError):
            os.unlink(temp, dir_fd=parent)


def _roll_back(root: Path, written: list[tuple[str, str, int]], result: Restored) -> None:
    """Remove what this restore wrote in one layer (each file only if it is still the one it wrote)."""
    for directory, name, inode in written:
        parent = _open_parent(root, directory, create=False)
        if isinstance(parent, str):
            continue
        try:
            if os.stat(name, dir_fd=parent, follow_symlinks=False).st_ino == inode:
                os.unlink(name, dir_fd=parent)
                result.landed -= 1
        except OSError:
            pass
        finally:
            os.close(parent)


def _local_state(parent: int, name: str, entry: SnapshotFile) -> str:
    """'missing', 'same' (these bytes are here), 'other' (other bytes: kept), or why it will not be written."""
    try:
        checked = fileio.read_checked(parent, name, None, _DISCARD, limit=entry.size)
    except FileNotFoundError:
        return "missing"
    except fileio.FileRefused as exc:
        if exc.reason == "too large":
            return "other"
        return "a link in the way" if exc.reason == "link" else f"{exc.reason} in the way"
    except OSError as exc:
        return f"unreadable ({exc.strerror})"
    return "same" if checked.sha256 == entry.sha256 or entry.relocate else "other"


class _Discard:
    """A sink that keeps nothing: a local file is only hashed."""

    def write(self, data: bytes, /) -> int:
        return len(data)


_DISCARD = _Discard()


def _open_parent(root: Path, directory: str, *, create: bool) -> int | str:
    """A descriptor of ``root/directory`` (``fileio.open_tree_dir`` under ``fileio.PUBLISHED``, ``root`` judged
    by the caller's ``trusted_root``; missing levels created 0700 with ``create``). A string says why not:
    'missing', 'a link in the way', 'a directory of another user or that others can write', or an OS error."""
    parts = directory.split("/") if directory else []
    try:
        return fileio.open_tree_dir(
            root, parts, fileio.PUBLISHED, create=create, check_root=False, mode=_DIR_MODE
        )
    except FileNotFoundError:
        return "missing"
    except fileio.UntrustedPath:
        return "a directory of another user or that others can write"
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            return "a link in the way"
        if exc.filename in parts:  # a level below the root (os.mkdir or os.open relative to its parent)
            return f"cannot write ({exc.strerror or exc})"
        return f"cannot open the cache root ({exc.strerror or exc})"
