"""The dynamic loader's cache (``ldconfig -p``): where the loader finds a library by soname when no
LD_LIBRARY_PATH or RPATH names it. The libcuda and libstdc++ probes both ask it; it is read, never changed.
"""

from __future__ import annotations

import platform
import re
import shutil
import subprocess
from dataclasses import dataclass

# ldconfig -p tags each entry with its ABI; only entries this machine's processes can load matter.
_ARCH_TAGS = {"x86_64": "x86-64", "aarch64": "AArch64", "ppc64le": "64bit", "s390x": "64bit"}
_LINE = re.compile(r"^\s*(?P<name>\S+)\s+\((?P<flags>[^)]*)\)\s+=>\s+(?P<path>\S.*)$")
# The loader's own directory may be outside PATH for non-root users.
_SEARCH = "/sbin:/usr/sbin:/bin:/usr/bin"


@dataclass(frozen=True)
class CacheEntry:
    name: str
    path: str


def multiarch_dir() -> str:
    """Debian-style multiarch triplet directory name for this machine, e.g. ``x86_64-linux-gnu``."""
    return f"{platform.machine()}-linux-gnu"


# The loader's trusted directories (and GNU ld's default search path), Debian and Red Hat layouts.
SYSTEM_LIB_DIRS = (
    f"/lib/{multiarch_dir()}",
    f"/usr/lib/{multiarch_dir()}",
    "/lib64",
    "/usr/lib64",
    "/lib",
    "/usr/lib",
)


def entries(timeout: float = 3.0) -> tuple[CacheEntry, ...]:
    """Entries of the loader cache for this machine's ABI; ``()`` when ldconfig is absent or fails."""
    ldconfig = shutil.which("ldconfig", path=_SEARCH)
    if ldconfig is None:
        return ()
    try:
        proc = subprocess.run(
            [ldconfig, "-p"],
            capture_output=True,
            text=True,
            timeout=timeout,
            env={"LC_ALL": "C"},
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return ()
    return parse(proc.stdout, platform.machine())


def parse(text: str, machine: str) -> tuple[CacheEntry, ...]:
    """Parse ``ldconfig -p`` output, keeping entries for ``machine`` (all entries when its tag is unknown)."""
    tag = _ARCH_TAGS.get(machine)
    found: list[CacheEntry] = []
    for line in text.splitlines():
        m = _LINE.match(line)
        if not m:
            continue
        flags = m.group("flags")
        if tag is not None and tag not in flags:
            continue
        found.append(CacheEntry(m.group("name"), m.group("path").strip()))
    return tuple(found)


def lookup(name: str, cache: tuple[CacheEntry, ...]) -> tuple[str, ...]:
    """Paths the cache lists for the library file name ``name`` (e.g. ``libcuda.so.1``), in cache order."""
    return tuple(e.path for e in cache if e.name == name)
