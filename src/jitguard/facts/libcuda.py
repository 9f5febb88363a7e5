"""Can FlashInfer's JIT link step find libcuda and libcudart here? Answered by a real trial link, not by
guessing.

FlashInfer 0.6.x links every JIT module with ``$CXX <objects> -shared -L$cuda_home/lib64
-L$cuda_home/lib64/stubs -lcudart -lcuda $FLASHINFER_EXTRA_LDFLAGS`` (``jit/cpp_ext.py``), so pip-style CUDA
(``lib/``, no stubs) or a driverless build host fails with ``cannot find -lcuda`` only after every kernel
compiled. This probe runs that link line on a one-line object in a temp dir, once per library so each gets its
own verdict, with the caller's LIBRARY_PATH, and keeps the exact command and the linker's output as evidence.
Results are cached per fingerprint of everything the linker's answer depends on, under the cache dir's trust
rules (``jitguard.fileio``: a verdict another user could have planted is never believed). The command and the
linker's output are kept redacted (``jitguard.redaction``): a token in FLASHINFER_EXTRA_LDFLAGS or a library
path is not evidence. Where a fix exists (a driver ``libcuda.so(.1)``, the toolkit's link stubs, pip and conda
copies) is ``libcuda_candidates``'s search.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shlex
import tempfile
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path

from jitguard import fileio
from jitguard.facts import ldcache
from jitguard.facts.libcuda_candidates import LibCandidate, find_candidates, fix_order
from jitguard.facts.tool_run import OUTPUT_LIMIT, run_tool
from jitguard.facts.toolchain import ToolchainFacts
from jitguard.redaction import redact_text

LIBRARIES = ("cudart", "cuda")
TRIAL_TIMEOUT_S = 30.0
_CACHE_SCHEMA = 1
_PROBE_SOURCE = 'extern "C" int jitguard_link_probe(void) { return 0; }\n'
# The directories GNU ld searches by default on Linux, plus common ones: a library appearing there changes
# the answer, so their state is part of the cache key.
_DEFAULT_LINK_DIRS = (*ldcache.SYSTEM_LIB_DIRS, "/usr/local/lib")


@dataclass(frozen=True)
class LinkTrial:
    """One trial link. ``status``: ``ok``; ``missing`` (the linker cannot find the library); ``failed`` (the
    link failed for another reason, see ``output``); ``not-run`` (no compiler, no CUDA home: see
    ``output``)."""

    library: str
    status: str
    command: tuple[str, ...]
    returncode: int | None
    output: str
    library_path: str | None

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def command_line(self) -> str:
        prefix = f"LIBRARY_PATH={shlex.quote(self.library_path)} " if self.library_path else ""
        return prefix + shlex.join(self.command)

    @property
    def evidence(self) -> tuple[str, ...]:
        """The command as run and the linker lines that explain the verdict."""
        lines = [line.strip() for line in self.output.splitlines() if line.strip()]
        relevant = [
            line for line in lines if f"-l{self.library}" in line or "error" in line.lower()
        ] or lines[-3:]
        return (f"$ {self.command_line}", *relevant[:4], f"exit status {self.returncode}")


@dataclass(frozen=True)
class LinkFacts:
    cxx: tuple[str, ...]
    cuda_home: str | None
    # FlashInfer's full link flags, extra flags included, in its order.
    ldflags: tuple[str, ...]
    extra_ldflags: tuple[str, ...]
    extra_ldflags_warning: str | None
    library_path: str | None
    cudart: LinkTrial
    cuda: LinkTrial
    candidates: tuple[LibCandidate, ...]
    fingerprint: str
    cached: bool
    error: str | None
    # The two verdicts as plain booleans (the environment fingerprint reads boolean fields).
    cudart_links: bool = False
    cuda_links: bool = False

    @property
    def ok(self) -> bool:
        return self.cudart.ok and self.cuda.ok

    def trial(self, library: str) -> LinkTrial:
        return self.cudart if library == "cudart" else self.cuda

    @property
    def link_command(self) -> str:
        """FlashInfer's link line for a module, as its build.ninja would run it."""
        quoted = [shlex.quote(a) for a in (*self.cxx, *self.ldflags)]
        return " ".join(
            [*quoted[: len(self.cxx)], "<objects>", *quoted[len(self.cxx) :], "-o", "<module>.so"]
        )

    def fix_dirs(self, library: str) -> tuple[str, ...]:
        """Directories that would satisfy ``-l<library>`` through ``-L<dir>``, best first."""
        ranked = sorted(
            (c for c in self.candidates if c.library == library and c.linkable),
            key=fix_order,
        )
        return tuple(dict.fromkeys(c.directory for c in ranked))

    def versioned_only(self, library: str) -> tuple[LibCandidate, ...]:
        """Candidates with only a versioned file (``libcuda.so.1``): linkable after a symlink."""
        return tuple(c for c in self.candidates if c.library == library and not c.linkable)


def probe(
    toolchain: ToolchainFacts, env: Mapping[str, str] | None = None, *, cache_dir: Path | str | None = None
) -> LinkFacts:
    """Run (or recall) FlashInfer's link line once for -lcudart and once for -lcuda; search for fixes."""
    env = dict(os.environ if env is None else env)
    extra, warning = flashinfer_extra_ldflags(env)
    cuda_home = toolchain.cuda_home
    ldflags = link_flags(cuda_home or "$cuda_home", extra)
    library_path = env.get("LIBRARY_PATH") or None
    candidates = find_candidates(toolchain, env)
    cxx = toolchain.cxx.command

    def result(cudart: LinkTrial, cuda: LinkTrial, fp: str, cached: bool, error: str | None) -> LinkFacts:
        return LinkFacts(
            cxx=cxx,
            cuda_home=cuda_home,
            ldflags=tuple(ldflags),
            extra_ldflags=extra,
            extra_ldflags_warning=warning,
            library_path=library_path,
            cudart=cudart,
            cuda=cuda,
            candidates=candidates,
            fingerprint=fp,
            cached=cached,
            error=error,
            cudart_links=cudart.ok,
            cuda_links=cuda.ok,
        )

    error = None
    if not toolchain.cxx.usable:
        error = f"no usable host compiler: {toolchain.cxx.error}"
    elif cuda_home is None:
        error = (
            "FlashInfer cannot resolve a CUDA home (no CUDA_HOME/CUDA_PATH, no nvcc on PATH, "
            "no /usr/local/cuda)"
        )
    if error is not None:
        skipped = [_not_run(lib, cxx, extra, cuda_home, library_path, error) for lib in LIBRARIES]
        return result(skipped[0], skipped[1], "", False, error)

    assert cuda_home is not None
    key = fingerprint(toolchain, cuda_home, ldflags, library_path)
    root = Path(cache_dir) if cache_dir is not None else None
    cache_file = root / "link" / f"{key[:40]}.json" if root is not None else None
    recalled = _read_cache(cache_file, key, root) if cache_file and root else None
    if recalled is not None:
        return result(recalled["cudart"], recalled["cuda"], key, True, None)

    trials, error = _trial_links(cxx, cuda_home, extra, env)
    # A linker that timed out or could not start (returncode None) says nothing about this machine's
    # libraries, only about this moment: remembering it would report a missing libcuda until the key changes.
    answered = all(t.returncode is not None for t in trials.values())
    if error is None and answered and cache_file is not None and root is not None:
        _write_cache(cache_file, key, trials, root)
    return result(trials["cudart"], trials["cuda"], key, False, error)


def flashinfer_extra_ldflags(env: Mapping[str, str]) -> tuple[tuple[str, ...], str | None]:
    """FLASHINFER_EXTRA_LDFLAGS split the way FlashInfer splits it (shlex, else whitespace with a warning)."""
    value = env.get("FLASHINFER_EXTRA_LDFLAGS")
    if not value:
        return (), None
    try:
        return tuple(shlex.split(value)), None
    except ValueError as exc:
        return tuple(
            value.split()
        ), f"FLASHINFER_EXTRA_LDFLAGS is not valid shell syntax ({exc}); split on spaces"


def link_flags(cuda_home: str, extra: Iterable[str], libraries: Iterable[str] = LIBRARIES) -> list[str]:
    """FlashInfer's ldflags with ``$cuda_home`` expanded (``libraries`` narrows the -l list for one trial)."""
    return [
        "-shared",
        f"-L{cuda_home}/lib64",
        f"-L{cuda_home}/lib64/stubs",
        *(f"-l{lib}" for lib in libraries),
        *extra,
    ]


def fingerprint(
    toolchain: ToolchainFacts, cuda_home: str, ldflags: list[str], library_path: str | None
) -> str:
    """Hash of everything the linker's answer depends on: compiler identity, flags, LIBRARY_PATH, and the
    libcuda* contents and mtimes of every directory the linker searches."""
    cxx_path = toolchain.cxx.path or ""
    dirs = [*_search_dirs(ldflags), *(library_path or "").split(":"), *_DEFAULT_LINK_DIRS]
    parts = {
        "schema": _CACHE_SCHEMA,
        "cxx": [
            list(toolchain.cxx.command),
            os.path.realpath(cxx_path),
            _stat(cxx_path),
            toolchain.cxx.version,
        ],
        "cuda_home": cuda_home,
        "ldflags": ldflags,
        "library_path": library_path,
        "dirs": [[d, _stat(d), _cuda_names(d)] for d in dict.fromkeys(d for d in dirs if d)],
    }
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()


def _trial_links(
    cxx: tuple[str, ...], cuda_home: str, extra: tuple[str, ...], env: Mapping[str, str]
) -> tuple[dict[str, LinkTrial], str | None]:
    run_env = {**env, "LC_ALL": "C"}
    library_path = env.get("LIBRARY_PATH") or None
    with tempfile.TemporaryDirectory(prefix="jitguard-link-") as tmp:
        source, obj = os.path.join(tmp, "probe.cpp"), os.path.join(tmp, "probe.o")
        Path(source).write_text(_PROBE_SOURCE)
        compiled = _run([*cxx, "-fPIC", "-c", source, "-o", obj], run_env, tmp)
        if compiled[0] != 0:
            detail = compiled[1].strip()[-OUTPUT_LIMIT:]
            error = f"the host compiler cannot compile a one-line C++ file: {detail}"
            return {
                lib: _not_run(lib, cxx, extra, cuda_home, library_path, error) for lib in LIBRARIES
            }, error

        def trial(lib: str) -> LinkTrial:
            out = os.path.join(tmp, f"probe_{lib}.so")
            argv = [*cxx, obj, *link_flags(cuda_home, extra, (lib,)), "-o", out]
            returncode, output = _run(argv, run_env, tmp)
            return _trial(lib, _verdict(lib, returncode, output), argv, returncode, output, library_path)

        with ThreadPoolExecutor(max_workers=len(LIBRARIES)) as pool:
            trials = dict(zip(LIBRARIES, pool.map(trial, LIBRARIES), strict=True))
    return trials, None


def _verdict(library: str, returncode: int | None, output: str) -> str:
    if returncode == 0:
        return "ok"
    not_found = (
        rf"cannot find -l{library}\b(?![\w.-])",  # GNU ld, gold
        rf"unable to find library -l{library}\b(?![\w.-])",  # lld
        rf"library not found for -l{library}\b(?![\w.-])",
    )
    return "missing" if any(re.search(p, output) for p in not_found) else "failed"


def _run(argv: list[str], env: Mapping[str, str], cwd: str) -> tuple[int | None, str]:
    done = run_tool(argv, env, cwd, timeout=TRIAL_TIMEOUT_S)
    return done.returncode, done.output


def _not_run(
    library: str,
    cxx: tuple[str, ...],
    extra: tuple[str, ...],
    cuda_home: str | None,
    library_path: str | None,
    why: str,
) -> LinkTrial:
    argv = (*cxx, "<object>", *link_flags(cuda_home or "$cuda_home", extra, (library,)))
    return _trial(library, "not-run", argv, None, why, library_path)


def _trial(
    library: str,
    status: str,
    argv: Iterable[str],
    returncode: int | None,
    output: str,
    library_path: str | None,
) -> LinkTrial:
    """A trial as kept and shown: its command, output and LIBRARY_PATH redacted."""
    return LinkTrial(
        library=library,
        status=status,
        command=tuple(redact_text(a) for a in argv),
        returncode=returncode,
        output=redact_text(output),
        library_path=None if library_path is None else redact_text(library_path),
    )


def _search_dirs(flags: Iterable[str]) -> list[str]:
    """The -L directories of a flag list (``-Ldir`` and ``-L dir``)."""
    flags = list(flags)
    dirs: list[str] = []
    for i, flag in enumerate(flags):
        if flag == "-L" and i + 1 < len(flags):
            dirs.append(flags[i + 1])
        elif flag.startswith("-L") and len(flag) > 2:
            dirs.append(flag[2:])
    return dirs


def _stat(path: str) -> list[int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return [st.st_mtime_ns, st.st_size, st.st_ino]


def _cuda_names(directory: str) -> list[str]:
    try:
        return sorted(n for n in os.listdir(directory) if n.startswith("libcuda"))
    except OSError:
        return []


def _read_cache(path: Path, key: str, root: Path) -> dict[str, LinkTrial] | None:
    """The cached trials, or None for a missing, untrusted, foreign or corrupt file (a miss, never an error)."""
    data = fileio.read_json(path, root=root)
    if data is None or data.get("schema") != _CACHE_SCHEMA or data.get("key") != key:
        return None
    try:
        trials = {}
        for lib in LIBRARIES:
            raw = data["trials"][lib]
            trials[lib] = LinkTrial(
                library=str(raw["library"]),
                status=str(raw["status"]),
                command=tuple(str(a) for a in raw["command"]),
                returncode=None if raw["returncode"] is None else int(raw["returncode"]),
                output=str(raw["output"]),
                library_path=None if raw["library_path"] is None else str(raw["library_path"]),
            )
            if trials[lib].library != lib or trials[lib].status not in ("ok", "missing", "failed"):
                return None
        return trials
    except (ValueError, KeyError, TypeError, AttributeError):
        return None


def _write_cache(path: Path, key: str, trials: Mapping[str, LinkTrial], root: Path) -> None:
    """An unwritable or untrusted cache dir only costs the next probe a re-run."""
    payload = {"schema": _CACHE_SCHEMA, "key": key, "trials": {lib: asdict(t) for lib, t in trials.items()}}
    with contextlib.suppress(OSError):
        fileio.write_json(path, payload, root=root)
