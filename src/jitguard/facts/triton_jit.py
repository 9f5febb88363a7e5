"""Can Triton's JIT build its launcher here? Its prerequisites found the way the installed Triton finds them,
and a real build of a C stub the way Triton builds its launcher.

Every Triton kernel launch on NVIDIA first compiles a small C module: the C compiler (``CC`` as one program,
else gcc, else clang), Python.h, and a directory with ``libcuda.so.1`` (``TRITON_LIBCUDA_PATH``, ldconfig,
``LD_LIBRARY_PATH``), as Triton 3.2-3.8 do (docs/findings.md, the triton codes). No CUDA, no import of
triton; the stub builds in a temp dir with a time bound, and verdicts are kept per compiler for the process.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from jitguard.facts.tool_run import ToolRun, run_tool

LDCONFIG = "/sbin/ldconfig"  # Triton runs this path, not the ldconfig on PATH
LIBCUDA = "libcuda.so.1"
BUILD_TIMEOUT_S = 20.0
_STUB = (
    "#define PY_SSIZE_T_CLEAN\n"
    "#include <Python.h>\n"
    "int jitguard_triton_stub(void) { return Py_IsInitialized(); }\n"
)
# Where a driver's libcuda.so.1 lives when the loader cache does not list it (Debian, Red Hat, containers, WSL).
_DRIVER_DIRS = (
    "/usr/lib/x86_64-linux-gnu",
    "/usr/lib/aarch64-linux-gnu",
    "/lib/x86_64-linux-gnu",
    "/usr/lib64",
    "/usr/local/nvidia/lib64",
    "/usr/local/nvidia/lib",
    "/usr/lib/wsl/lib",
)
_verdicts: dict[str, StubBuild] = {}
_verdicts_lock = threading.Lock()


@dataclass(frozen=True)
class CCompiler:
    """The C compiler Triton runs. ``source``: ``CC``, ``PATH`` or ``none``; ``path``: the executable it
    resolves to (None when nothing runs); ``others``: compilers on this machine Triton would not pick (``cc``,
    ``gcc-12``, one off PATH), the candidates for ``CC``."""

    command: str | None
    source: str
    path: str | None
    others: tuple[str, ...] = ()

    @property
    def usable(self) -> bool:
        return self.path is not None


@dataclass(frozen=True)
class LibcudaLookup:
    """Triton's libcuda directories. ``source``: ``TRITON_LIBCUDA_PATH``, ``ldconfig``, ``LD_LIBRARY_PATH``
    or ``none``; ``found``: Triton's check passes; ``error``: Triton's own message when it would not;
    ``fix_dirs``: directories on this machine holding the file Triton links (``libcuda.so.1``, or
    ``libcuda.so`` up to 3.5)."""

    source: str
    dirs: tuple[str, ...]
    found: bool
    link_flag: str
    listed: tuple[str, ...] = ()  # the libcuda.so.1 paths ldconfig listed
    error: str | None = None
    fix_dirs: tuple[str, ...] = ()


@dataclass(frozen=True)
class StubBuild:
    """One build of the stub. ``status``: ``ok``, ``cc-missing`` (the compiler did not start),
    ``headers-missing`` (Python.h not found), ``libcuda-missing`` (the linker found no libcuda), ``failed``
    (another error: see ``output``) or ``not-run`` (``output`` says why)."""

    status: str
    command: tuple[str, ...]
    returncode: int | None
    output: str
    cached: bool = False

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def evidence(self) -> tuple[str, ...]:
        lines = [line.strip() for line in self.output.splitlines() if line.strip()]
        relevant = [
            line
            for line in lines
            if "error" in line.lower() or "cannot find" in line or "No such file" in line
        ] or lines[-3:]
        return (f"$ {' '.join(self.command)}", *relevant[:4], f"exit status {self.returncode}")


@dataclass(frozen=True)
class TritonJitFacts:
    triton_version: str
    python_version: str  # "3.11": the -dev package to name
    cc: CCompiler
    python_include: str
    python_h: bool
    libcuda: LibcudaLookup
    compile: StubBuild  # the stub with Python.h, no libcuda: the compiler and the headers
    link: StubBuild  # the same with Triton's -L and -l flags for libcuda (not-run when none was found)

    @property
    def ok(self) -> bool:
        return self.compile.ok and self.link.ok


def probe(
    triton_version: str,
    env: Mapping[str, str] | None = None,
    *,
    include_dir: str | None = None,
    ldconfig: str = LDCONFIG,
    triton_dir: str | None = None,
) -> TritonJitFacts:
    """Triton's launcher prerequisites here. ``include_dir`` replaces sysconfig's include path, ``ldconfig``
    the loader-cache tool (tests); ``triton_dir`` is the installed package (its ``backends/nvidia/lib`` is
    Triton's first ``-L``)."""
    env = dict(os.environ if env is None else env)
    cc = find_compiler(env)
    include = include_dir if include_dir is not None else python_include_dir()
    python_h = os.path.isfile(os.path.join(include, "Python.h"))
    lookup = find_libcuda(triton_version, env, ldconfig=ldconfig)
    compiled = build_stub(cc, include, env)
    if not compiled.ok:
        linked = StubBuild("not-run", (), None, "the stub did not compile without libcuda")
    elif not lookup.found:
        linked = StubBuild("not-run", (), None, lookup.error or "Triton finds no libcuda here")
    else:
        extra = [os.path.join(triton_dir, "backends", "nvidia", "lib")] if triton_dir else []
        linked = build_stub(cc, include, env, library_dirs=(*extra, *lookup.dirs), link_flag=lookup.link_flag)
    return TritonJitFacts(
        triton_version=triton_version,
        python_version=f"{sys.version_info.major}.{sys.version_info.minor}",
        cc=cc,
        python_include=include,
        python_h=python_h,
        libcuda=lookup,
        compile=compiled,
        link=linked,
    )


def find_compiler(env: Mapping[str, str]) -> CCompiler:
    """Triton's choice: ``CC`` verbatim, else gcc, else clang on PATH."""
    path = env.get("PATH", os.defpath)
    others = _other_compilers(path)
    if "CC" in env:
        command = env["CC"]
        resolved = shutil.which(command, path=path) if command else None
        return CCompiler(command, "CC", resolved, others)
    for name in ("gcc", "clang"):
        found = shutil.which(name, path=path)
        if found:
            return CCompiler(name, "PATH", found, tuple(o for o in others if o != found))
    return CCompiler(None, "none", None, others)


def _other_compilers(path: str) -> tuple[str, ...]:
    """C compilers on this machine by other names or off PATH: what ``CC`` could name."""
    dirs = [*path.split(os.pathsep), "/usr/bin", "/usr/local/bin"]
    found: list[str] = []
    seen: set[str] = set()  # one entry per real file (/bin -> /usr/bin, x86_64-linux-gnu-gcc -> gcc-12)
    for d in dict.fromkeys(d for d in dirs if d):
        try:
            names = sorted(os.listdir(d))
        except OSError:
            continue
        for name in names:
            base = name.rsplit("-", 1)[0] if name[-1:].isdigit() else name
            if base in ("cc", "gcc", "clang", f"{_triplet()}-gcc"):
                full = os.path.join(d, name)
                real = os.path.realpath(full)
                if os.access(full, os.X_OK) and not os.path.isdir(full) and real not in seen:
                    seen.add(real)
                    found.append(full)
    return tuple(found[:6])


def _triplet() -> str:
    return f"{os.uname().machine}-linux-gnu"


def python_include_dir() -> str:
    """sysconfig's include path the way Triton asks for it."""
    scheme = sysconfig.get_default_scheme()
    if scheme == "posix_local":  # Debian's custom scheme: Triton reads posix_prefix instead
        scheme = "posix_prefix"
    return sysconfig.get_paths(scheme=scheme)["include"]


def link_flag(triton_version: str) -> str:
    """``-lcuda`` up to Triton 3.5, ``-l:libcuda.so.1`` from 3.6 (its ``libraries = ['libcuda.so.1']``)."""
    try:
        major, minor = (int(p) for p in triton_version.split("+", 1)[0].split(".")[:2])
    except ValueError:
        return f"-l:{LIBCUDA}"  # an unreadable version: the newest rules
    return "-lcuda" if (major, minor) < (3, 6) else f"-l:{LIBCUDA}"


def find_libcuda(triton_version: str, env: Mapping[str, str], *, ldconfig: str = LDCONFIG) -> LibcudaLookup:
    """Triton's ``libcuda_dirs()``, as a fact: where it looks, what it finds, its message when it fails."""
    flag = link_flag(triton_version)
    needed = "libcuda.so" if flag == "-lcuda" else LIBCUDA
    ld_dirs = [d for d in env.get("LD_LIBRARY_PATH", "").split(":") if d]
    fix_dirs = _fix_dirs(needed, ld_dirs)
    explicit = env.get("TRITON_LIBCUDA_PATH")
    if explicit:
        return LibcudaLookup("TRITON_LIBCUDA_PATH", (explicit,), True, flag, fix_dirs=fix_dirs)
    if not os.path.exists(ldconfig):
        missing = f"FileNotFoundError: [Errno 2] No such file or directory: '{ldconfig}'"
        return LibcudaLookup("none", (), False, flag, error=missing, fix_dirs=fix_dirs)
    listed = _ldconfig_libcuda(ldconfig)
    dirs = [os.path.dirname(p) for p in listed]
    source = "ldconfig"
    if not dirs and ld_dirs:
        dirs = [d for d in ld_dirs if os.path.exists(os.path.join(d, LIBCUDA))]
        source = "LD_LIBRARY_PATH"
    found = any(os.path.exists(os.path.join(d, LIBCUDA)) for d in dirs)
    error: str | None = None
    if not found:
        error = "libcuda.so cannot found! " + (
            f"Possible files are located at {list(listed)}."
            if listed
            else 'Please make sure GPU is set up and then run "/sbin/ldconfig" (requires sudo) to refresh the '
            "linker cache."
        )
    return LibcudaLookup(source if dirs else "none", tuple(dirs), found, flag, tuple(listed), error, fix_dirs)


def _ldconfig_libcuda(ldconfig: str) -> tuple[str, ...]:
    """The last word of every ``ldconfig -p`` line naming libcuda.so.1 (Triton keeps every ABI's)."""
    try:
        out = subprocess.run(
            [ldconfig, "-p"], capture_output=True, timeout=5, check=False, env={"LC_ALL": "C"}
        ).stdout.decode(errors="ignore")
    except (OSError, subprocess.SubprocessError):
        return ()
    return tuple(line.split()[-1] for line in out.splitlines() if LIBCUDA in line and line.split())


def _fix_dirs(needed: str, ld_dirs: Sequence[str]) -> tuple[str, ...]:
    """Directories holding a driver's ``needed`` file (never a link stub: Triton also loads it)."""
    found = [
        d
        for d in dict.fromkeys([*ld_dirs, *_DRIVER_DIRS])
        if "stubs" not in Path(d).parts and os.path.exists(os.path.join(d, needed))
    ]
    return tuple(found)


def build_stub(
    cc: CCompiler,
    include: str,
    env: Mapping[str, str],
    *,
    library_dirs: Sequence[str] = (),
    link_flag: str | None = None,
) -> StubBuild:
    """Build the stub with Triton's command (with ``link_flag`` and ``library_dirs``: its libcuda link too);
    a verdict is kept per compiler identity and inputs for the life of the process."""
    if cc.command is None:
        return StubBuild("cc-missing", (), None, "no CC, and neither gcc nor clang on PATH")
    libs = [link_flag] if link_flag else []
    flags = ["-O3", "-shared", "-fPIC", "-Wno-psabi"]
    shown = (cc.command, "stub.c", *flags, "-o", "stub.so", *libs, *(f"-L{d}" for d in library_dirs))
    shown += (f"-I{include}",)
    key = _key(cc, include, library_dirs, link_flag, env)
    with _verdicts_lock:
        known = _verdicts.get(key)
    if known is not None:
        return StubBuild(known.status, shown, known.returncode, known.output, cached=True)
    with tempfile.TemporaryDirectory(prefix="jitguard-triton-") as tmp:
        source, out = os.path.join(tmp, "stub.c"), os.path.join(tmp, "stub.so")
        Path(source).write_text(_STUB)
        argv = [cc.command, source, *flags, "-o", out, *libs, *(f"-L{d}" for d in library_dirs)]
        argv += [f"-I{tmp}", f"-I{include}"]
        done = run_tool(argv, {**env, "LC_ALL": "C"}, tmp, timeout=BUILD_TIMEOUT_S)
    returncode, output = done.returncode, done.output
    verdict = StubBuild(_status(done), shown, returncode, output.replace(tmp, "<tmp>"))
    if returncode is not None or verdict.status == "cc-missing":  # a timeout is this moment's, not the host's
        with _verdicts_lock:
            _verdicts[key] = verdict
    return verdict


def forget() -> None:
    """Drop the kept build verdicts (tests; a process that installed a compiler meanwhile)."""
    with _verdicts_lock:
        _verdicts.clear()


def _status(done: ToolRun) -> str:
    returncode, output = done.returncode, done.output
    if returncode == 0:
        return "ok"
    if not done.started:
        return "cc-missing"
    if "Python.h" in output and "No such file" in output:
        return "headers-missing"
    if "cannot find -lcuda" in output or f"cannot find -l:{LIBCUDA}" in output:
        return "libcuda-missing"
    return "failed"


def _key(
    cc: CCompiler,
    include: str,
    library_dirs: Sequence[str],
    flag: str | None,
    env: Mapping[str, str],
) -> str:
    def stat(path: str | None) -> list[int] | None:
        try:
            st = os.stat(path) if path else None
        except OSError:
            return None
        return [st.st_mtime_ns, st.st_size, st.st_ino] if st else None

    parts = {
        "cc": [cc.command, cc.path, os.path.realpath(cc.path) if cc.path else None, stat(cc.path)],
        "include": [include, stat(os.path.join(include, "Python.h"))],
        "libs": [flag, [[d, stat(d)] for d in library_dirs]],
        "env": [env.get(k) for k in ("PATH", "LIBRARY_PATH", "CPATH", "C_INCLUDE_PATH", "LD_LIBRARY_PATH")],
    }
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()
