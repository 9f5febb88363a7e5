"""The build toolchain FlashInfer's nvcc-era JIT uses: nvcc, ninja and the host C++ compiler, each with its
path and version, and the CUDA_HOME FlashInfer 0.6.x resolves (``facts.cuda_homes``).

FlashInfer (``jit/cpp_ext.py``) compiles with ``$FLASHINFER_NVCC`` or ``$cuda_home/bin/nvcc``, links with
``$CXX`` or ``c++``, and runs ``ninja`` from PATH. A missing tool is a fact here, never an exception; version
commands run in parallel with short timeouts so the doctor stays fast.
"""

from __future__ import annotations

import functools
import glob
import os
import re
import shlex
import shutil
import subprocess
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from jitguard.facts.cuda_archs import parse_nvcc_help
from jitguard.facts.cuda_homes import CudaHome, find_cuda_homes, resolve_cuda_home

VERSION_TIMEOUT_S = 5.0

_NVCC_RELEASE = re.compile(r"release (\d+)\.(\d+)")
_NVCC_VERSION = re.compile(r"\bV(\d+\.\d+\.\d+)")
_DRYRUN_VAR = re.compile(r"^#\$ (?P<name>[A-Z_]+)=(?P<value>.*)$")
_NUMBER = re.compile(r"\d+(?:\.\d+)+")


@dataclass(frozen=True)
class Tool:
    """One tool as FlashInfer would invoke it.

    ``command`` is the configured command (``CXX`` may be ``ccache g++``); ``path`` the resolved executable
    (None
    when not found); ``banner`` the first line of its version output (evidence); ``error`` why it is unusable.
    """

    name: str
    command: tuple[str, ...]
    path: str | None
    version: str | None = None
    banner: str | None = None
    error: str | None = None

    @property
    def found(self) -> bool:
        return self.path is not None

    @property
    def usable(self) -> bool:
        return self.path is not None and self.error is None

    @property
    def version_tuple(self) -> tuple[int, ...]:
        return tuple(int(p) for p in self.version.split(".")) if self.version else ()


@dataclass(frozen=True)
class ToolchainFacts:
    cuda_home: str | None
    # Which rule of FlashInfer's order gave cuda_home: CUDA_HOME, CUDA_PATH, "which nvcc", "default",
    # "unresolved".
    cuda_home_source: str
    nvcc: Tool
    # "FLASHINFER_NVCC" or "cuda_home": where FlashInfer's nvcc command came from.
    nvcc_source: str
    nvcc_release: tuple[int, int] | None
    nvcc_on_path: str | None
    # The toolkit nvcc really runs from (its TOP, through wrapper scripts) and the include dirs it adds
    # itself.
    nvcc_toolkit_dir: str | None
    nvcc_include_dirs: tuple[str, ...]
    ninja: Tool
    cxx: Tool
    # "CXX" when the CXX environment variable chose the compiler, else "default" (c++).
    cxx_source: str
    # $cuda_home/include/cuda_runtime.h when it exists (FlashInfer passes -isystem $cuda_home/include).
    cuda_runtime_header: str | None
    cuda_homes: tuple[CudaHome, ...]
    # Other host compilers on PATH (g++-13, clang++-17, ...), for "build with a compiler matching the
    # runtime".
    cxx_alternatives: tuple[str, ...]
    # The PATH the tools were looked up in.
    search_path: str = ""
    # Every value nvcc's --gpu-architecture accepts, from `nvcc --help` (compute_120f, sm_90a, ...); () when
    # nvcc is missing or its help has no such list (facts.cuda_archs then falls back to its release table).
    nvcc_gpu_archs: tuple[str, ...] = ()

    @property
    def nvcc_finds_headers(self) -> bool:
        """cuda_runtime.h is reachable for a .cu compile: via $cuda_home/include or nvcc's own include
        dirs."""
        if self.cuda_runtime_header:
            return True
        return any(os.path.isfile(os.path.join(d, "cuda_runtime.h")) for d in self.nvcc_include_dirs)


def probe(env: Mapping[str, str] | None = None) -> ToolchainFacts:
    """Probe nvcc, ninja and the host compiler the way FlashInfer would find them under ``env``."""
    env = dict(os.environ if env is None else env)
    search_path = env.get("PATH", os.defpath)
    run_env = {**env, "LC_ALL": "C"}

    cuda_home, cuda_home_source = resolve_cuda_home(env)
    nvcc_command, nvcc_source = flashinfer_nvcc_command(env, cuda_home)
    cxx_command, cxx_source = flashinfer_cxx_command(env)
    nvcc_path = _which(nvcc_command, search_path)
    ninja_path = shutil.which("ninja", path=search_path)
    cxx_path = _which(cxx_command, search_path)

    jobs: dict[str, Callable[[], tuple[int | None, str, str | None]]] = {}
    if nvcc_path:
        jobs["nvcc"] = lambda: _run([*nvcc_command, "--version"], run_env)
        jobs["nvcc-dryrun"] = lambda: _run(
            [*nvcc_command, "-dryrun", "-x", "cu", "-c", os.devnull, "-o", os.devnull], run_env
        )
        jobs["nvcc-archs"] = lambda: (0, "\n".join(nvcc_gpu_archs(nvcc_command, nvcc_path, run_env)), None)
    if ninja_path:
        jobs["ninja"] = lambda: _run(["ninja", "--version"], run_env)
    if cxx_path:
        jobs["cxx"] = lambda: _run([*cxx_command, "--version"], run_env)
    with ThreadPoolExecutor(max_workers=max(1, len(jobs))) as pool:
        futures = {name: pool.submit(job) for name, job in jobs.items()}
        results = {name: fut.result() for name, fut in futures.items()}

    nvcc = _tool(
        "nvcc", nvcc_command, nvcc_path, results.get("nvcc"), _nvcc_version, _nvcc_missing(nvcc_command)
    )
    release_match = _NVCC_RELEASE.search(results["nvcc"][1]) if "nvcc" in results else None
    nvcc_release = (int(release_match.group(1)), int(release_match.group(2))) if release_match else None
    toolkit_dir, include_dirs = (
        _parse_dryrun(results["nvcc-dryrun"][1]) if "nvcc-dryrun" in results else (None, ())
    )
    ninja = _tool(
        "ninja", ("ninja",), ninja_path, results.get("ninja"), _plain_version, "ninja is not on PATH"
    )
    cxx = _tool(
        "c++", cxx_command, cxx_path, results.get("cxx"), _cxx_version, _cxx_missing(cxx_command, cxx_source)
    )

    header = os.path.join(cuda_home, "include", "cuda_runtime.h") if cuda_home else None
    return ToolchainFacts(
        cuda_home=cuda_home,
        cuda_home_source=cuda_home_source,
        nvcc=nvcc,
        nvcc_source=nvcc_source,
        nvcc_release=nvcc_release,
        nvcc_on_path=shutil.which("nvcc", path=search_path),
        nvcc_toolkit_dir=toolkit_dir,
        nvcc_include_dirs=include_dirs,
        ninja=ninja,
        cxx=cxx,
        cxx_source=cxx_source,
        cuda_runtime_header=header if header and os.path.isfile(header) else None,
        cuda_homes=find_cuda_homes(env, [cuda_home, toolkit_dir]),
        cxx_alternatives=_cxx_alternatives(search_path),
        search_path=search_path,
        nvcc_gpu_archs=tuple(results["nvcc-archs"][1].split()) if "nvcc-archs" in results else (),
    )


def nvcc_gpu_archs(command: tuple[str, ...], path: str, env: Mapping[str, str]) -> tuple[str, ...]:
    """The values ``--gpu-architecture`` of ``command`` accepts, read once per process per nvcc executable
    (same path, size and mtime): an engine collects its facts more than once."""
    try:
        st = os.stat(path)
    except OSError:
        return ()
    return _nvcc_gpu_archs(command, path, st.st_size, st.st_mtime_ns, tuple(sorted(env.items())))


@functools.lru_cache(maxsize=16)
def _nvcc_gpu_archs(
    command: tuple[str, ...], path: str, size: int, mtime_ns: int, env: tuple[tuple[str, str], ...]
) -> tuple[str, ...]:
    returncode, output, error = _run([*command, "--help"], dict(env))
    if error is not None or returncode != 0:
        return ()
    return parse_nvcc_help(output)


def flashinfer_nvcc_command(env: Mapping[str, str], cuda_home: str | None) -> tuple[tuple[str, ...], str]:
    """The nvcc command FlashInfer writes into build.ninja, with ninja's ``$cuda_home`` expanded."""
    configured = env.get("FLASHINFER_NVCC")
    source = "FLASHINFER_NVCC" if configured is not None else "cuda_home"
    text = configured if configured is not None else "$cuda_home/bin/nvcc"
    text = text.replace("${cuda_home}", cuda_home or "").replace("$cuda_home", cuda_home or "")
    return _split(text), source


def flashinfer_cxx_command(env: Mapping[str, str]) -> tuple[tuple[str, ...], str]:
    """The host compiler command FlashInfer links with: ``$CXX`` (it may hold a launcher, e.g. ``ccache
    g++``)."""
    if "CXX" in env:
        return _split(env["CXX"]), "CXX"
    return ("c++",), "default"


def _split(text: str) -> tuple[str, ...]:
    try:
        return tuple(shlex.split(text))
    except ValueError:
        return tuple(text.split())


def _which(command: tuple[str, ...], search_path: str) -> str | None:
    """The executable a command runs: a launcher such as ``ccache`` counts, so resolve the first word."""
    if not command:
        return None
    found = shutil.which(command[0], path=search_path)
    return os.path.abspath(found) if found else None


def _run(argv: list[str], env: Mapping[str, str]) -> tuple[int | None, str, str | None]:
    """(returncode, combined output, error) of a short version command; never raises."""
    try:
        proc = subprocess.run(
            argv,
            env=dict(env),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            errors="replace",
            timeout=VERSION_TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return None, "", f"`{shlex.join(argv)}` did not answer within {VERSION_TIMEOUT_S:g} s"
    except OSError as exc:
        return None, "", f"`{shlex.join(argv)}` could not run: {exc.strerror or exc}"
    return proc.returncode, proc.stdout + proc.stderr, None


def _tool(
    name: str,
    command: tuple[str, ...],
    path: str | None,
    result: tuple[int | None, str, str | None] | None,
    parse: Callable[[str], str | None],
    missing: str,
) -> Tool:
    if path is None or result is None:
        return Tool(name, command, None, error=missing)
    returncode, output, error = result
    banner = _banner(output)
    if error is not None:
        return Tool(name, command, path, banner=banner, error=error)
    version = parse(output)
    if returncode != 0 or version is None:
        detail = banner or "no output"
        return Tool(
            name, command, path, version, banner, f"`{shlex.join(command)} --version` failed: {detail}"
        )
    return Tool(name, command, path, version, banner)


def _banner(output: str) -> str | None:
    """The line that carries the version (nvcc prints it last; compilers and ninja first)."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    for line in lines:
        if "release" in line and "Cuda compilation tools" in line:
            return line
    return lines[0] if lines else None


def _nvcc_version(output: str) -> str | None:
    m = _NVCC_VERSION.search(output)
    if m:
        return m.group(1)
    release = _NVCC_RELEASE.search(output)
    return f"{release.group(1)}.{release.group(2)}" if release else None


def _plain_version(output: str) -> str | None:
    m = _NUMBER.search(output)
    return m.group(0) if m else None


def _cxx_version(output: str) -> str | None:
    """gcc: ``c++ (Debian 12.2.0-14) 12.2.0`` (last number); clang: ``clang version 17.0.6 (...)``."""
    first = output.strip().splitlines()[0] if output.strip() else ""
    clang = re.search(r"clang version (\d+(?:\.\d+)+)", first)
    if clang:
        return clang.group(1)
    numbers = _NUMBER.findall(first)
    return numbers[-1] if numbers else None


def _parse_dryrun(output: str) -> tuple[str | None, tuple[str, ...]]:
    """nvcc's own TOP and include directories from ``nvcc -dryrun`` (works through wrapper scripts)."""
    top: str | None = None
    includes: list[str] = []
    for line in output.splitlines():
        m = _DRYRUN_VAR.match(line.strip())
        if not m:
            continue
        name, value = m.group("name"), m.group("value").strip()
        if name == "TOP" and top is None:
            top = os.path.realpath(value)
        elif name in ("INCLUDES", "SYSTEM_INCLUDES"):
            words = _split(value)
            for i, word in enumerate(words):
                if word.startswith("-I") and len(word) > 2:
                    includes.append(os.path.normpath(word[2:]))
                elif word in ("-isystem", "-I") and i + 1 < len(words):
                    includes.append(os.path.normpath(words[i + 1]))
    return top, tuple(dict.fromkeys(includes))


def _nvcc_missing(command: tuple[str, ...]) -> str:
    if not command:
        return "FLASHINFER_NVCC is set but empty"
    return f"{command[0]} does not exist or is not executable"


def _cxx_missing(command: tuple[str, ...], source: str) -> str:
    if not command:
        return "CXX is set but empty: FlashInfer would run an empty compiler command"
    where = "named by CXX" if source == "CXX" else "FlashInfer's default host compiler"
    return f"{command[0]} ({where}) is not on PATH"


def _cxx_alternatives(search_path: str) -> tuple[str, ...]:
    found: dict[str, str] = {}
    for directory in search_path.split(os.pathsep):
        if not directory:
            continue
        for pattern in ("g++-[0-9]*", "clang++-[0-9]*"):
            for path in glob.glob(os.path.join(directory, pattern)):
                name = os.path.basename(path)
                if name not in found and os.access(path, os.X_OK) and re.fullmatch(r"[\w+]+-\d+", name):
                    found[name] = path
    return tuple(sorted(found.values()))
