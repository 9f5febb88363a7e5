"""facts: read-only probes of this machine. Cheap, side-effect free, never initialise CUDA in this process and
never import heavy packages (torch, flashinfer, triton) to learn a version.

``collect()`` runs every probe and returns one frozen ``Facts``; the checks in ``jitguard.findings`` turn it into
findings. Each probe module exposes ``probe(...)`` returning its own frozen dataclass.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from jitguard.facts.disk import DiskFacts
    from jitguard.facts.environment import EnvironmentFacts
    from jitguard.facts.flashinfer import FlashinferFacts
    from jitguard.facts.gpu import GpuFacts
    from jitguard.facts.libcuda import LinkFacts
    from jitguard.facts.libstdcxx import LibstdcxxFacts
    from jitguard.facts.memory import MemoryFacts
    from jitguard.facts.packages import PackageFacts
    from jitguard.facts.toolchain import ToolchainFacts


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


def collect(env: Mapping[str, str] | None = None, *, cache_dir: Path | None = None) -> Facts:
    """Probe everything. ``env`` defaults to os.environ; ``cache_dir`` to jitguard's cache dir."""
    from jitguard.config import default_cache_dir
    from jitguard.facts import (
        disk,
        environment,
        fingerprint,
        flashinfer,
        gpu,
        libcuda,
        libstdcxx,
        memory,
        packages,
        toolchain,
    )

    env = dict(os.environ if env is None else env)
    cache_dir = cache_dir or default_cache_dir(env)
    tool = toolchain.probe(env)
    pkgs = packages.probe()
    gpu_facts = gpu.probe(env)
    # Without FLASHINFER_CUDA_ARCH_LIST, FlashInfer names its workspace after the visible GPUs' archs.
    arch = " ".join(flashinfer.arch_from_capability(*cc) for cc in gpu_facts.capability_pairs()) or None
    fi = flashinfer.probe(pkgs, env, arch=arch)
    parts = {
        "gpu": gpu_facts,
        "toolchain": tool,
        "link": libcuda.probe(tool, env, cache_dir=cache_dir),
        "libstdcxx": libstdcxx.probe(tool, env),
        "memory": memory.probe(),
        "disk": disk.probe([fi.workspace_dir, cache_dir]),
        "packages": pkgs,
        "flashinfer": fi,
        "environment": environment.probe(env),
    }
    return Facts(**parts, fingerprint=fingerprint.compute(**parts))  # type: ignore[arg-type]
