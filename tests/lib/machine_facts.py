"""``Facts`` from this machine's own probes, with fields replaced, for the checks' tests (the package checks and
the CuTeDSL checks and the system checks read the same few facts): a real workspace and jitguard cache dir
under ``tmp_path``."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any

from jitguard.facts import Facts, disk, environment, flashinfer, gpu, memory, packages


def make_facts(tmp_path: Path, env_extra: dict[str, str] | None = None, **changes: Any) -> Facts:
    env = {
        "HOME": str(tmp_path / "home"),
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "FLASHINFER_CUDA_ARCH_LIST": "9.0a",
        "FLASHINFER_WORKSPACE_BASE": str(tmp_path / "ws"),
        "JITGUARD_CACHE_DIR": str(tmp_path / "cache"),
        **(env_extra or {}),
    }
    pkgs = changes.pop("packages", None) or packages.probe()
    fi = flashinfer.probe(pkgs, env)
    facts = Facts(
        gpu=gpu.probe(env),
        toolchain=None,  # type: ignore[arg-type]  # not read by these checks
        link=None,  # type: ignore[arg-type]
        libstdcxx=None,  # type: ignore[arg-type]
        memory=memory.probe(),
        disk=disk.probe([fi.workspace_dir, Path(env["JITGUARD_CACHE_DIR"])]),
        packages=pkgs,
        flashinfer=fi,
        environment=environment.probe(env),
        fingerprint="test",
    )
    return dataclasses.replace(facts, **changes)
