"""A warm snapshot: every file of an engine start's JIT caches, named by content, for one software stack and
GPU arch (``StackKey``).

``scan`` records each regular file of each cache layer without following a link; ``Snapshot.from_json``
refuses what a restore must not act on (absolute or climbing paths, duplicates, bad sizes or digests). Links,
locks, partial files and FlashInfer's nvcc build trees are left out (those travel as modules); Triton's
group files are rewritten for the restoring host (docs/fleet.md).
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import platform
import re
import sys
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO, cast

from jitguard import fileio
from jitguard.facts.jit_caches import LAYER_NAMES, CacheLayer

if TYPE_CHECKING:
    from jitguard.fleet.signing import Seal

SCHEMA = "jitguard.warm-snapshot/1"
# A manifest entry is ~150 bytes of JSON: 100,000 files fit in 16 MiB, and a larger document is refused before
# it is parsed (docs/fleet.md); parsing costs a small multiple of its size (benchmarks/results/warm_trust.md).
MAX_FILES = 100_000
MAX_FILE_BYTES = 8 * 1024**3
MAX_MANIFEST_BYTES = 24 * 1024**2
_IN_MEMORY = 8 * 1024**2  # a file saved is copied to memory up to this size, else to a private temporary file
_ARCH = re.compile(r"sm_[0-9]{2,3}[a-z]?")
# Names that are never a cache entry: locks, temporary and partial writes (Triton, Inductor, FlashInfer,
# filelock and jitguard's own patterns).
_TRANSIENT = re.compile(r"(\.lock|\.tmp|\.temp|\.partial|\.fetch|\.swp|\.pid)$|^tmp\.|\.tmp\.|^\.nfs")
TRITON_GROUP = "triton-group"

STACK_DISTRIBUTIONS = (
    "vllm",
    "sglang",
    "sglang-kernel",
    "torch",
    "triton",
    "flashinfer-python",
    "flashinfer-cubin",
    "flashinfer-jit-cache",
    "nvidia-cutlass-dsl",
    "apache-tvm-ffi",
    "fla-core",
    "deep-gemm",
)


class SnapshotRejected(ValueError):
    """A manifest a restore must not act on: malformed, foreign, or for another stack or arch."""


@dataclass(frozen=True)
class StackKey:
    """What a snapshot is for: ``material`` (distribution -> version, the Python ABI, the machine) and the GPU
    ``arch`` (``sm_90``). ``digest`` names its manifests in the store."""

    material: Mapping[str, str]
    arch: str

    def __post_init__(self) -> None:
        if not _ARCH.fullmatch(self.arch):
            raise ValueError(f"not a GPU arch: {self.arch!r} (expected e.g. sm_90)")

    @property
    def digest(self) -> str:
        text = json.dumps(dict(self.material), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()[:32]

    def describe(self) -> str:
        parts = [f"{k} {v}" for k, v in sorted(self.material.items()) if k in STACK_DISTRIBUTIONS]
        return f"{', '.join(parts) or 'no engine packages'}; {self.arch}"


def stack_key(arch: str, path: list[str] | None = None) -> StackKey:
    """The stack installed here (on ``path``, else sys.path) for ``arch``."""
    material: dict[str, str] = {
        "python": f"{sys.implementation.cache_tag} {platform.python_version()}",
        "machine": platform.machine(),
    }
    wanted = set(STACK_DISTRIBUTIONS)
    found = (
        importlib.metadata.distributions() if path is None else importlib.metadata.distributions(path=path)
    )
    for dist in found:
        name = (dist.metadata["Name"] or "").lower().replace("_", "-")
        if name in wanted and name not in material:
            material[name] = dist.version
    return StackKey(material, arch)


def arch_of(capability: str) -> str:
    """``sm_90`` for a compute capability ``9.0`` (as NVML or FLASHINFER_CUDA_ARCH_LIST write it; a trailing
    ``a``/``f`` family suffix is dropped: the caches of one GPU serve both)."""
    match = re.fullmatch(r"\s*(\d+)\.(\d+)[af]?\s*", capability)
    if not match:
        raise ValueError(f"not a compute capability: {capability!r} (expected e.g. 9.0)")
    return f"sm_{match.group(1)}{match.group(2)}"


@dataclass(frozen=True, slots=True)
class SnapshotFile:
    layer: str
    path: str  # relative to the layer's root, '/'-separated
    size: int
    sha256: str
    mode: int  # permission bits as saved (0600 stays 0600); never writable by group or others
    relocate: str | None = None

    def to_json(self) -> dict[str, Any]:
        entry: dict[str, Any] = {
            "path": self.path,
            "size": self.size,
            "sha256": self.sha256,
            "mode": self.mode,
        }
        if self.relocate:
            entry["relocate"] = self.relocate
        return entry


@dataclass(frozen=True)
class Snapshot:
    stack: StackKey
    name: str
    roots: Mapping[str, str]  # layer -> the root it was saved from (for relocating Triton's groups)
    files: tuple[SnapshotFile, ...]
    created: float = 0.0
    publisher: str = ""
    jitguard_version: str = ""
    skipped: Mapping[str, int] = field(default_factory=dict)  # why -> how many files were left out
    signature: Seal | None = None  # who signed the manifest it was read from (fleet.signing)

    @property
    def bytes(self) -> int:
        return sum(f.size for f in self.files)

    def to_json(self) -> dict[str, Any]:
        layers: dict[str, Any] = {}
        for entry in self.files:
            layers.setdefault(entry.layer, {"root": self.roots.get(entry.layer, ""), "files": []})
            layers[entry.layer]["files"].append(entry.to_json())
        return {
            "schema": SCHEMA,
            "name": self.name,
            "stack": dict(self.stack.material),
            "stack_digest": self.stack.digest,
            "arch": self.stack.arch,
            "created": self.created,
            "publisher": self.publisher,
            "jitguard": self.jitguard_version,
            "layers": layers,
        }

    @classmethod
    def from_json(cls, data: Any, expected: StackKey, name: str) -> Snapshot:
        """Raises SnapshotRejected for a manifest that is malformed, or for another stack, arch or name."""
        if not isinstance(data, dict) or data.get("schema") != SCHEMA:
            raise SnapshotRejected(f"not a jitguard warm snapshot manifest ({SCHEMA})")
        if data.get("arch") != expected.arch or data.get("name") != name:
            raise SnapshotRejected(f"the manifest is for {data.get('arch')!r}/{data.get('name')!r}")
        stack = data.get("stack")
        if not isinstance(stack, dict) or stack != dict(expected.material):
            raise SnapshotRejected(
                "the manifest is for another software stack: " + _stack_difference(stack, expected)
            )
        layers = data.get("layers")
        if not isinstance(layers, dict):
            raise SnapshotRejected("the manifest has no layers")
        files: list[SnapshotFile] = []
        roots: dict[str, str] = {}
        seen: set[tuple[str, str]] = set()
        for layer_name, body in layers.items():
            if (
                layer_name not in LAYER_NAMES
                or not isinstance(body, dict)
                or not isinstance(body.get("files"), list)
            ):
                raise SnapshotRejected(f"the manifest has a layer {layer_name!r} jitguard does not know")
            roots[layer_name] = str(body.get("root", ""))
            for raw in body["files"]:
                entry = _file_from_json(layer_name, raw)
                if (layer_name, entry.path) in seen:
                    raise SnapshotRejected(f"the manifest names {layer_name}/{entry.path} twice")
                seen.add((layer_name, entry.path))
                files.append(entry)
                if len(files) > MAX_FILES:
                    raise SnapshotRejected(f"the manifest lists more than {MAX_FILES} files")
        created = data.get("created")
        if created is not None and not fileio.is_time(created):
            raise SnapshotRejected(f"the manifest gives an impossible creation time {str(created)[:40]!r}")
        return cls(
            stack=expected,
            name=name,
            roots=roots,
            files=tuple(files),
            created=float(created) if created is not None else 0.0,
            publisher=str(data.get("publisher", "")),
            jitguard_version=str(data.get("jitguard", "")),
        )


def _stack_difference(stack: Any, expected: StackKey) -> str:
    if not isinstance(stack, dict):
        return "no stack recorded"
    names = sorted(set(stack) | set(expected.material))
    differ = [
        f"{n} {stack.get(n, '-')} there, {expected.material.get(n, '-')} here"
        for n in names
        if stack.get(n) != expected.material.get(n)
    ]
    return "; ".join(differ[:4]) or "?"


def _file_from_json(layer_name: str, raw: Any) -> SnapshotFile:
    if not isinstance(raw, dict):
        raise SnapshotRejected(f"a file entry of layer {layer_name} is not an object")
    path, size, digest, mode = raw.get("path"), raw.get("size"), raw.get("sha256"), raw.get("mode", 0o644)
    if not fileio.is_safe_relative(path):
        raise SnapshotRejected(f"the manifest names a path {path!r} that is not a plain relative path")
    if not isinstance(size, int) or isinstance(size, bool) or not 0 <= size <= MAX_FILE_BYTES:
        raise SnapshotRejected(f"the manifest gives {path} an impossible size {size!r}")
    if not fileio.is_sha256(digest):
        raise SnapshotRejected(f"the manifest gives {path} no SHA-256 digest")
    if not isinstance(mode, int) or isinstance(mode, bool) or mode & ~0o755 or not mode & 0o400:
        raise SnapshotRejected(
            f"the manifest gives {path} the mode {mode!r} (a restore writes only modes within 0755 that the "
            "owner can read)"
        )
    relocate = raw.get("relocate")
    if relocate not in (None, TRITON_GROUP):
        raise SnapshotRejected(
            f"the manifest asks to relocate {path} as {relocate!r}, which jitguard does not know"
        )
    return SnapshotFile(layer_name, str(path), size, str(digest), mode, relocate)


# -- scanning ---------------------------------------------------------------------------------------------


class LeftOut:
    """Why files were left out of a save: why -> count, and the first few paths of each reason (the report)."""

    EXAMPLES = 3

    def __init__(self) -> None:
        self.counts: dict[str, int] = {}
        self.examples: dict[str, list[str]] = {}

    def add(self, why: str, where: str, count: int = 1) -> None:
        self.counts[why] = self.counts.get(why, 0) + count
        shown = self.examples.setdefault(why, [])
        if len(shown) < self.EXAMPLES:
            shown.append(where)

    def describe(self) -> str:
        return "; ".join(
            f"{n} {why} (e.g. {', '.join(self.examples.get(why, []))})"
            for why, n in sorted(self.counts.items())
        )


def _build_tree(relative: str, names: list[str]) -> str | None:
    return "nvcc build tree (shared as a module)" if "build.ninja" in names else None


def layer_root(cache: CacheLayer) -> Path:
    return Path(os.path.abspath(os.path.expanduser(cache.root)))


def read_layer(cache: CacheLayer, left_out: LeftOut) -> Iterator[tuple[SnapshotFile, BinaryIO]]:
    """Every file of ``cache`` a host may publish, each as its entry and a private copy of exactly the bytes
    that were checked and hashed (``fileio.read_checked``), one at a time (the caller uploads it, then the
    next is read). The root, every directory and every file must be ours (or root's) and not writable by
    others (``fileio.PUBLISHED``); anything else is left out with its reason."""
    root = layer_root(cache)
    real, reasons = fileio.trusted_root(root, fileio.PUBLISHED)
    if reasons:
        left_out.add(f"cache root not trusted ({reasons[0]})", f"{cache.name}: {root}")
        return
    try:
        root_fd = fileio.open_dir(real)
    except (FileNotFoundError, NotADirectoryError):
        return
    except OSError as exc:
        left_out.add(f"cache root unreadable ({exc.strerror or exc})", f"{cache.name}: {root}")
        return
    try:
        for found in fileio.walk_files(
            root_fd,
            fileio.PUBLISHED,
            lambda why, where: left_out.add(why, f"{cache.name}/{where}"),
            prune=_build_tree,
        ):
            label = f"{cache.name}/{found.relative}"
            if _TRANSIENT.search(found.name):
                left_out.add("lock or temporary file", label)
                continue
            spool = tempfile.SpooledTemporaryFile(max_size=_IN_MEMORY)  # noqa: SIM115 (the caller closes it)
            try:
                checked = fileio.read_checked(
                    found.dir_fd,
                    found.name,
                    fileio.PUBLISHED,
                    cast(BinaryIO, spool),
                    limit=MAX_FILE_BYTES,
                    label=label,
                )
            except fileio.FileRefused as exc:
                spool.close()
                left_out.add(exc.reason, label)
                continue
            except OSError as exc:
                spool.close()
                left_out.add(f"unreadable ({exc.strerror or exc})", label)
                continue
            spool.seek(0)
            relocate = (
                TRITON_GROUP if found.name.startswith("__grp__") and found.name.endswith(".json") else None
            )
            entry = SnapshotFile(
                cache.name, found.relative, checked.size, checked.sha256, checked.mode & 0o755, relocate
            )
            yield entry, cast(BinaryIO, spool)
    finally:
        os.close(root_fd)


def listing(layers: tuple[CacheLayer, ...]) -> set[tuple[str, str, int]]:
    """(layer, path, size) of every file a save would consider, without reading any: whether a save would add
    anything to a stored snapshot, at the cost of a directory walk."""
    found: set[tuple[str, str, int]] = set()
    for cache in layers:
        real, reasons = fileio.trusted_root(layer_root(cache), fileio.PUBLISHED)
        if reasons:
            continue
        try:
            root_fd = fileio.open_dir(real)
        except OSError:
            continue
        try:
            for item in fileio.walk_files(
                root_fd, fileio.PUBLISHED, lambda why, where: None, prune=_build_tree
            ):
                if not _TRANSIENT.search(item.name):
                    found.add((cache.name, item.relative, item.st.st_size))
        finally:
            os.close(root_fd)
    return found


def relocate_triton_group(data: bytes, old_root: str, new_root: str) -> bytes:
    """A Triton ``__grp__*.json`` (``{"child_paths": {name: absolute path}}``) with every path under
    ``old_root`` moved under ``new_root``. Other content is kept as it is; bytes that are not such a file are
    returned unchanged (Triton then misses the group and compiles, as without jitguard)."""
    if not old_root or old_root == new_root:
        return data
    try:
        group = json.loads(data)
    except ValueError:
        return data
    children = group.get("child_paths") if isinstance(group, dict) else None
    if not isinstance(children, dict):
        return data
    prefix = old_root.rstrip("/") + "/"
    for child, target in children.items():
        if isinstance(target, str) and target.startswith(prefix):
            children[child] = new_root.rstrip("/") + "/" + target[len(prefix) :]
    return json.dumps(group).encode()
