"""What the installed files of the packages behind a FlashInfer kernel are now, as one digest: each
distribution's name and version, and the size and modification time of every file its RECORD lists.

The engine proof (``integrations/proof.py``) may skip its call only where nothing it depends on changed since
it last passed; the fingerprint covers versions, driver and GPU, not a file rewritten in place (a DSL copied
over, a hand-edited kernel module, a reinstall of the same version from another build). A stat per file, no
read: about 3,400 files for FlashInfer and the CUTLASS DSL, tens of milliseconds. Byte-compiled files are left
out: Python writes them on import without changing what runs.
"""

from __future__ import annotations

import hashlib
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import metadata

# The distributions a FlashInfer GDN kernel is made of, by name or name prefix (the DSL's -libs-* wheels).
PROOF_DISTS = (
    "flashinfer-python",
    "flashinfer-jit-cache",
    "flashinfer-cubin",
    "nvidia-cutlass-dsl",
    "apache-tvm-ffi",
)


@dataclass(frozen=True)
class InstalledFiles:
    """``digest`` of the files of ``versions`` (distribution -> version, as found first on the path)."""

    digest: str
    versions: tuple[tuple[str, str], ...]
    files: int


def normalise(name: str) -> str:
    return name.lower().replace("_", "-").replace(".", "-")


def installed_files(names: Sequence[str] = PROOF_DISTS, path: Sequence[str] | None = None) -> InstalledFiles:
    """The digest of every installed distribution whose name is, or starts with, one of ``names`` (the first
    of each name on ``path``, default sys.path, as an import would find it)."""
    seen: dict[str, metadata.Distribution] = {}
    for dist in metadata.distributions(path=list(sys.path if path is None else path)):
        name = normalise(dist.metadata["Name"] or "")
        if name and name not in seen and any(name == n or name.startswith(n + "-") for n in names):
            seen[name] = dist
    sha = hashlib.sha256()
    count = 0
    for name in sorted(seen):
        dist = seen[name]
        sha.update(f"{name}=={dist.version}\n".encode())
        for entry in dist.files or ():
            relative = str(entry)
            if relative.endswith(".pyc"):
                continue
            try:
                st = os.stat(str(dist.locate_file(entry)))
                state = f"{st.st_size}:{st.st_mtime_ns}"
            except OSError:
                state = "missing"
            sha.update(f"{relative}\0{state}\n".encode())
            count += 1
    versions = tuple((name, seen[name].version) for name in sorted(seen))
    return InstalledFiles(sha.hexdigest()[:16], versions, count)
