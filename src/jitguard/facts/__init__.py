"""facts: read-only probes of this machine. Cheap, side-effect free, never initialise CUDA in this process and
never import heavy packages (torch, flashinfer, triton) to learn a version.

``collect()`` runs every probe and returns one frozen ``Facts``; the checks in ``jitguard.findings`` turn it into
findings. Each probe module exposes ``probe(...)`` returning its own frozen dataclass.

A probe that raises (a missing dependency such as pyelftools, a bug, an OS surprise) never takes ``collect()``
down: its place holds an ``Unavailable`` whose every attribute read raises ``FactUnavailable``, and
``Facts.unavailable`` names it with the error. The checks turn that into a ``fact-unavailable`` finding for
the checks that needed it, so a verdict says "unknown" there instead of "passed" (docs/failsafe.md).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from jitguard.config import default_cache_dir

if TYPE_CHECKING:
    from jitguard.cutedsl.dsl_install import DslInstallFacts
    from jitguard.cutedsl.dsl_path import DslPathFacts
    from jitguard.facts.disk import DiskFacts
    from jitguard.facts.environment import EnvironmentFacts
    from jitguard.facts.filesystems import FilesystemFacts
    from jitguard.facts.flashinfer import FlashinferFacts
    from jitguard.facts.gpu import GpuFacts
    from jitguard.facts.libcuda import LinkFacts
    from jitguard.facts.libstdcxx import LibstdcxxFacts
    from jitguard.facts.memory import MemoryFacts
    from jitguard.facts.packages import PackageFacts
    from jitguard.facts.toolchain import ToolchainFacts
    from jitguard.facts.triton_jit import TritonJitFacts


T = TypeVar("T")


class FactUnavailable(AttributeError):
    """A check read a fact that could not be collected. An AttributeError, so defensive ``getattr(x, name,
    default)`` readers (the fingerprint) see the default; direct reads raise this."""

    def __init__(self, fact: str, error: str) -> None:
        super().__init__(f"the {fact} facts could not be collected: {error}")
        self.fact = fact
        self.error = error


class Unavailable:
    """Stands in for one fact that could not be collected (see the module docstring)."""

    __slots__ = ("_jitguard_error", "_jitguard_fact")

    def __init__(self, fact: str, error: str) -> None:
        object.__setattr__(self, "_jitguard_fact", fact)
        object.__setattr__(self, "_jitguard_error", error)

    def __getattr__(self, name: str) -> Any:
        raise FactUnavailable(object.__getattribute__(self, "_jitguard_fact"), self._jitguard_error)

    def __repr__(self) -> str:
        return f"Unavailable({self._jitguard_fact!r}, {self._jitguard_error!r})"


def describe_error(exc: BaseException) -> str:
    """``Type: message`` of an exception, the form every fact-unavailable finding shows."""
    if isinstance(exc, FactUnavailable):
        return f"needs the {exc.fact} facts ({exc.error})"
    return f"{type(exc).__name__}: {exc}"


@dataclass(frozen=True)
class Facts:
    gpu: GpuFacts
    toolchain: ToolchainFacts
    link: LinkFacts
    libstdcxx: LibstdcxxFacts
    memory: MemoryFacts
    disk: DiskFacts
    packages: PackageFacts
    flashinfer: FlashinferFacts
    environment: EnvironmentFacts
    fingerprint: str
    # fact name -> the error its probe raised (its field then holds an Unavailable)
    unavailable: Mapping[str, str] = field(default_factory=dict)
    # CuTeDSL era only (None otherwise): the nvidia-cutlass-dsl wheels' files against their RECORD (~1 s)
    dsl_install: DslInstallFacts | None = None
    # CuTeDSL era only: where ``import cutlass`` finds the DSL, and the GPUs' GDN kernel modules (~0.1 s)
    dsl_path: DslPathFacts | None = None
    # Triton installed only (None otherwise): its JIT's C compiler, Python.h and libcuda, and a real stub build
    triton_jit: TritonJitFacts | None = None
    # The file systems of jitguard's cache dir, FlashInfer's workspace and Triton's cache (network or not)
    filesystems: FilesystemFacts | None = None
    # probe name -> seconds it took here (the start ledger names the slowest: jitguard's own cost)
    seconds: Mapping[str, float] = field(default_factory=dict)


def collect(env: Mapping[str, str] | None = None, *, cache_dir: Path | None = None) -> Facts:
    """Probe everything. ``env`` defaults to os.environ; ``cache_dir`` to jitguard's cache dir."""
    # lazy: every `import jitguard.facts.<probe>` runs this file first; only collect() needs them all
    from jitguard.cutedsl import dsl_install, dsl_path
    from jitguard.facts import (
        disk,
        environment,
        filesystems,
        fingerprint,
        flashinfer,
        gpu,
        libcuda,
        libstdcxx,
        memory,
        packages,
        toolchain,
        triton_jit,
    )

    env = dict(os.environ if env is None else env)
    cache_dir = cache_dir or default_cache_dir(env)
    unavailable: dict[str, str] = {}
    seconds: dict[str, float] = {}

    def run(name: str, probe: Callable[[], T]) -> T:
        started = time.perf_counter()
        try:
            return probe()
        except Exception as exc:  # any probe's crash is one unknown fact, never a crash of collect()
            unavailable[name] = describe_error(exc)
            return Unavailable(name, unavailable[name])  # type: ignore[return-value]
        finally:
            seconds[name] = time.perf_counter() - started

    tool = run("toolchain", lambda: toolchain.probe(env))
    pkgs = run("packages", packages.probe)
    gpu_facts = run("gpu", lambda: gpu.probe(env))

    def flashinfer_facts() -> Any:
        # Without FLASHINFER_CUDA_ARCH_LIST, FlashInfer names its workspace after the visible GPUs' archs.
        pairs = gpu_facts.capability_pairs() if "gpu" not in unavailable else ()
        arch = " ".join(flashinfer.arch_from_capability(*cc) for cc in pairs) or None
        return flashinfer.probe(pkgs, env, arch=arch)

    fi = run("flashinfer", flashinfer_facts)
    parts: dict[str, Any] = {
        "gpu": gpu_facts,
        "toolchain": tool,
        "link": run("link", lambda: libcuda.probe(tool, env, cache_dir=cache_dir)),
        "libstdcxx": run("libstdcxx", lambda: libstdcxx.probe(tool, env)),
        "memory": run("memory", memory.probe),
        "disk": run("disk", lambda: disk.probe([fi.workspace_dir, cache_dir])),
        "packages": pkgs,
        "flashinfer": fi,
        "environment": run("environment", lambda: environment.probe(env)),
    }
    triton = pkgs.get("triton") if "packages" not in unavailable else None
    jit = None
    if triton is not None:
        where = os.path.join(triton.location, "triton") if triton.location else None
        jit = run("triton_jit", lambda: triton_jit.probe(triton.version, env, triton_dir=where))
    dsl = dsl_where = None
    if "flashinfer" not in unavailable and fi.era == flashinfer.ERA_CUTEDSL:
        dsl = run("dsl_install", lambda: dsl_install.probe(cache_dir=cache_dir))
        majors = {major for major, _ in gpu_facts.capability_pairs()} if "gpu" not in unavailable else set()
        dsl_where = run("dsl_path", lambda: dsl_path.probe(fi.package_dir, majors))
    key = run(
        "fingerprint", lambda: fingerprint.compute(**parts, dsl_path=dsl_where, unavailable=unavailable)
    )
    if not isinstance(key, str):  # even the key failed: a constant one keeps the failure cache usable
        key = "unavailable"
    places: dict[str, Path] = {"cache_dir": cache_dir, "triton_cache_dir": filesystems.triton_cache_dir(env)}
    if "flashinfer" not in unavailable:
        places["flashinfer_workspace"] = fi.workspace_dir
    mounts = run("filesystems", lambda: filesystems.probe(places))
    return Facts(
        **parts,
        fingerprint=key,
        unavailable=dict(unavailable),
        dsl_install=dsl,
        dsl_path=dsl_where,
        triton_jit=jit,
        filesystems=mounts,
        seconds=dict(seconds),
    )
