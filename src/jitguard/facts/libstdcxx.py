"""Which GLIBCXX versions the host compiler's libstdc++ provides, and which the libstdc++ a Python process
here
loads (or would load) provides.

A JIT module linked by a new g++ needs that g++'s newest GLIBCXX symbols; loaded into a process that already
holds an older libstdc++ (typically conda's), the loader refuses it: ``version `GLIBCXX_3.4.32' not found``.
Versions are read from the libraries' ELF version sections, never guessed from file names.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass

from jitguard.facts import elf, ldcache
from jitguard.facts.toolchain import ToolchainFacts

SONAME = "libstdc++.so.6"
_TIMEOUT_S = 5.0
# GCC release that first shipped each GLIBCXX version (libstdc++ manual, "ABI Policy and Guidelines").
FIRST_GCC_WITH: dict[str, str] = {
    "GLIBCXX_3.4.25": "8.1",
    "GLIBCXX_3.4.26": "9.1",
    "GLIBCXX_3.4.27": "9.2",
    "GLIBCXX_3.4.28": "9.3",
    "GLIBCXX_3.4.29": "11.1",
    "GLIBCXX_3.4.30": "12.1",
    "GLIBCXX_3.4.31": "13.1",
    "GLIBCXX_3.4.32": "13.2",
    "GLIBCXX_3.4.33": "14.1",
    "GLIBCXX_3.4.34": "15.1",
}


@dataclass(frozen=True)
class LibstdcxxFacts:
    """Paths are real paths. ``*_versions`` hold every version node the library defines (GLIBCXX_*,
    CXXABI_*, ...).

    ``runtime_source`` says how the runtime library was chosen: ``LD_PRELOAD``, ``loaded`` (already mapped
    in this
    process), ``LD_LIBRARY_PATH``, ``python rpath``, ``CONDA_PREFIX``, ``ldconfig``, ``default dirs`` or
    ``none``.
    """

    compiler_lib: str | None
    compiler_versions: tuple[str, ...]
    compiler_error: str | None
    runtime_lib: str | None
    runtime_source: str
    runtime_versions: tuple[str, ...]
    runtime_error: str | None
    loaded_lib: str | None

    @property
    def compiler_max(self) -> str | None:
        return elf.max_version(self.compiler_versions, "GLIBCXX")

    @property
    def runtime_max(self) -> str | None:
        return elf.max_version(self.runtime_versions, "GLIBCXX")

    @property
    def missing_in_runtime(self) -> tuple[str, ...]:
        """GLIBCXX/CXXABI versions the compiler's libstdc++ has and the runtime's lacks (what a module built
        here
        may need and not get)."""
        if self.runtime_lib is None or self.compiler_lib is None:
            return ()
        runtime = set(self.runtime_versions)
        wanted = elf.versions_with_prefix(self.compiler_versions, "GLIBCXX") + elf.versions_with_prefix(
            self.compiler_versions, "CXXABI"
        )
        return tuple(v for v in wanted if v not in runtime)

    @property
    def runtime_older(self) -> bool:
        return bool(self.missing_in_runtime)


def probe(toolchain: ToolchainFacts, env: Mapping[str, str] | None = None) -> LibstdcxxFacts:
    """The compiler's libstdc++ (``$CXX -print-file-name``) and the runtime one, with their version nodes."""
    env = dict(os.environ if env is None else env)
    compiler_lib, compiler_error = compiler_libstdcxx(toolchain, env)
    compiler_versions: tuple[str, ...] = ()
    if compiler_lib:
        compiler_versions, compiler_error = _versions(compiler_lib)
    loaded = loaded_libstdcxx()
    runtime_lib, source = runtime_libstdcxx(env, loaded)
    runtime_versions: tuple[str, ...] = ()
    runtime_error = None if runtime_lib else "no libstdc++.so.6 found where the loader would look"
    if runtime_lib:
        runtime_versions, runtime_error = _versions(runtime_lib)
    return LibstdcxxFacts(
        compiler_lib=compiler_lib,
        compiler_versions=compiler_versions,
        compiler_error=compiler_error,
        runtime_lib=runtime_lib,
        runtime_source=source,
        runtime_versions=runtime_versions,
        runtime_error=runtime_error,
        loaded_lib=loaded,
    )


def for_library(path: str) -> LibstdcxxFacts:
    """Facts for a runtime that is exactly ``path`` (e.g. a libstdc++ found in another environment)."""
    versions, error = _versions(path)
    real = os.path.realpath(path)
    return LibstdcxxFacts(None, (), None, real, "given", versions, error, None)


def compiler_libstdcxx(toolchain: ToolchainFacts, env: Mapping[str, str]) -> tuple[str | None, str | None]:
    """``$CXX -print-file-name=libstdc++.so.6``, resolved; gcc echoes the bare name when it has none."""
    if not toolchain.cxx.usable:
        return None, toolchain.cxx.error or "no host compiler"
    argv = [*toolchain.cxx.command, f"-print-file-name={SONAME}"]
    try:
        proc = subprocess.run(
            argv,
            env={**env, "LC_ALL": "C"},
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        return None, f"`{' '.join(argv)}` failed: {exc}"
    answer = proc.stdout.strip()
    if proc.returncode != 0 or not answer or not os.path.isabs(answer) or not os.path.exists(answer):
        return None, f"the host compiler does not use a {SONAME} (`{' '.join(argv)}` printed {answer!r})"
    return os.path.realpath(answer), None


def loaded_libstdcxx(maps: str = "/proc/self/maps") -> str | None:
    """The libstdc++ mapped into this process, if any."""
    try:
        with open(maps, encoding="utf-8", errors="replace") as handle:
            for line in handle:
                parts = line.split(None, 5)
                if len(parts) == 6 and os.path.basename(parts[5].strip()).startswith(SONAME):
                    return os.path.realpath(parts[5].strip())
    except OSError:
        return None
    return None


def runtime_libstdcxx(env: Mapping[str, str], loaded: str | None) -> tuple[str | None, str]:
    """The libstdc++ a Python process started with ``env`` ends up with, and why.

    A library already mapped into this process wins (the loader reuses it by soname) when ``env`` is this
    process's own library environment; otherwise follow the loader's search order.
    """
    for entry in env.get("LD_PRELOAD", "").replace(":", " ").split():
        if os.path.basename(entry).startswith(SONAME) and os.path.exists(entry):
            return os.path.realpath(entry), "LD_PRELOAD"
    same_process_env = all(env.get(k) == os.environ.get(k) for k in ("LD_LIBRARY_PATH", "LD_PRELOAD"))
    if loaded and same_process_env:
        return loaded, "loaded"
    for directory in _split_path(env.get("LD_LIBRARY_PATH", "")):
        found = _in_dir(directory)
        if found:
            return found, "LD_LIBRARY_PATH"
    for directory in _python_rpath():
        found = _in_dir(directory)
        if found:
            return found, "python rpath"
    if env.get("CONDA_PREFIX"):
        found = _in_dir(os.path.join(env["CONDA_PREFIX"], "lib"))
        if found:
            return found, "CONDA_PREFIX"
    cached = ldcache.lookup(SONAME, ldcache.entries())
    if cached and os.path.exists(cached[0]):
        return os.path.realpath(cached[0]), "ldconfig"
    for directory in ldcache.SYSTEM_LIB_DIRS:  # searched after LD_LIBRARY_PATH, RPATH and the cache
        found = _in_dir(directory)
        if found:
            return found, "default dirs"
    return None, "none"


def _python_rpath() -> tuple[str, ...]:
    """DT_RPATH of the interpreter: unlike RUNPATH it applies to every library the process loads (conda's
    python
    carries ``$ORIGIN/../lib``, which is how conda's libstdc++ ends up in the process)."""
    try:
        return elf.dynamic_info(sys.executable).rpath
    except elf.ElfReadError:
        return ()


def _in_dir(directory: str) -> str | None:
    path = os.path.join(directory, SONAME)
    return os.path.realpath(path) if os.path.exists(path) else None


def _split_path(value: str) -> list[str]:
    return [p for p in value.split(":") if p]


def _versions(path: str) -> tuple[tuple[str, ...], str | None]:
    try:
        return elf.defined_versions(path), None
    except elf.ElfReadError as exc:
        return (), str(exc)
