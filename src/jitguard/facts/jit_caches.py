"""Where the JIT caches of an engine start live on this host, found the way each tool finds its own.

One layer per cache (vllm, sglang, triton, inductor, flashinfer, deep_gemm, tilelang, jitguard's kernels), each from
its own variable and default as the tool reads them (docs/fleet.md). ``layers(env)`` is pure; SGLang's
redirection of the others under ``SGLANG_CACHE_DIR`` is followed, and of two layers that nest only the outer
one is kept, so no file is counted twice.
"""

from __future__ import annotations

import getpass
import os
import re
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from jitguard import fileio

LAYER_NAMES = ("vllm", "sglang", "triton", "inductor", "flashinfer", "deep_gemm", "tilelang", "jitguard")


@dataclass(frozen=True)
class CacheLayer:
    """One tool's cache: ``name`` (a LAYER_NAMES entry), the directory, and the variable that placed it
    (``None``: the tool's default)."""

    name: str
    root: Path
    variable: str | None

    def describe(self) -> str:
        origin = f"${self.variable}" if self.variable else "default"
        return f"{self.name}: {self.root} ({origin})"


def _home(env: Mapping[str, str]) -> Path:
    return Path(env.get("HOME") or os.path.expanduser("~"))


def _xdg_cache(env: Mapping[str, str]) -> Path:
    return Path(env["XDG_CACHE_HOME"]) if env.get("XDG_CACHE_HOME") else _home(env) / ".cache"


def _inductor_default(env: Mapping[str, str]) -> Path:
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = str(os.getuid())
    tmp = env.get("TMPDIR") or tempfile.gettempdir()
    return Path(tmp) / ("torchinductor_" + re.sub(r'[\\/:*?"<>|]', "_", user))


def _set(env: Mapping[str, str], name: str) -> str | None:
    value = env.get(name)
    return value if value else None


def layer(name: str, env: Mapping[str, str], jitguard_cache_dir: Path) -> CacheLayer:
    """The cache directory of layer ``name`` in ``env``."""
    if name == "vllm":
        var = _set(env, "VLLM_CACHE_ROOT")
        return CacheLayer(
            name, Path(var) if var else _xdg_cache(env) / "vllm", "VLLM_CACHE_ROOT" if var else None
        )
    if name == "sglang":
        var = _set(env, "SGLANG_CACHE_DIR")
        # SGLang: os.path.expanduser("~/.cache/sglang"), XDG_CACHE_HOME not read
        return CacheLayer(
            name, Path(var) if var else _home(env) / ".cache" / "sglang", "SGLANG_CACHE_DIR" if var else None
        )
    if name == "triton":
        var = _set(env, "TRITON_CACHE_DIR")
        if var:
            return CacheLayer(name, Path(var), "TRITON_CACHE_DIR")
        home = Path(env["TRITON_HOME"]) if env.get("TRITON_HOME") else _home(env)
        return CacheLayer(name, home / ".triton" / "cache", "TRITON_HOME" if env.get("TRITON_HOME") else None)
    if name == "inductor":
        var = _set(env, "TORCHINDUCTOR_CACHE_DIR")
        return CacheLayer(
            name, Path(var) if var else _inductor_default(env), "TORCHINDUCTOR_CACHE_DIR" if var else None
        )
    if name == "flashinfer":
        # FlashInfer: Path(os.getenv("FLASHINFER_WORKSPACE_BASE", Path.home())) / ".cache" / "flashinfer"
        var = env.get("FLASHINFER_WORKSPACE_BASE")
        base = Path(var) if var is not None else _home(env)
        return CacheLayer(
            name, base / ".cache" / "flashinfer", "FLASHINFER_WORKSPACE_BASE" if var is not None else None
        )
    if name == "deep_gemm":
        for variable in ("SGLANG_DG_CACHE_DIR", "DG_JIT_CACHE_DIR"):
            if env.get(variable):
                return CacheLayer(name, Path(env[variable]), variable)
        return CacheLayer(name, _home(env) / ".cache" / "deep_gemm", None)  # SGLang's; vLLM's is in its own
    if name == "tilelang":
        # TileLang: TILELANG_CACHE_DIR, else os.path.expanduser("~/.tilelang/cache")
        var = _set(env, "TILELANG_CACHE_DIR")
        return CacheLayer(
            name,
            Path(var) if var else _home(env) / ".tilelang" / "cache",
            "TILELANG_CACHE_DIR" if var else None,
        )
    if name == "jitguard":
        return CacheLayer(
            name,
            Path(jitguard_cache_dir) / "kernels",
            "JITGUARD_CACHE_DIR" if (env.get("JITGUARD_CACHE_DIR") or "").strip() else None,
        )
    raise ValueError(f"unknown cache layer {name!r} (known: {', '.join(LAYER_NAMES)})")


def layers(
    env: Mapping[str, str], jitguard_cache_dir: Path, names: tuple[str, ...] = LAYER_NAMES
) -> tuple[CacheLayer, ...]:
    """The layers ``names`` in ``env``, each directory once: a layer inside another layer's directory (or the
    same directory) is left out, since the outer one holds its files."""
    found = [layer(name, env, jitguard_cache_dir) for name in names]
    outermost_first = sorted(found, key=lambda candidate: len(_absolute(candidate.root).parts))
    kept: list[CacheLayer] = []
    for candidate in outermost_first:
        if not any(_within(_absolute(candidate.root), _absolute(outer.root)) for outer in kept):
            kept.append(candidate)
    return tuple(c for c in found if c in kept)


def _absolute(path: Path) -> Path:
    return Path(os.path.abspath(os.path.expanduser(path)))


def _within(path: Path, other: Path) -> bool:
    return path == other or other in path.parents


# Where a user's own cache of each layer goes when the default is not safe to publish (docs/fleet.md).
OWN_PLACE = {
    "vllm": "~/.cache/vllm",
    "sglang": "~/.cache/sglang",
    "triton": "~/.triton/cache",
    "inductor": "~/.cache/torchinductor",
    "flashinfer": "~",
    "deep_gemm": "~/.cache/deep_gemm",
    "tilelang": "~/.tilelang/cache",
    "jitguard": "~/.cache/jitguard",
}
VARIABLE = {
    "vllm": "VLLM_CACHE_ROOT",
    "sglang": "SGLANG_CACHE_DIR",
    "triton": "TRITON_CACHE_DIR",
    "inductor": "TORCHINDUCTOR_CACHE_DIR",
    "flashinfer": "FLASHINFER_WORKSPACE_BASE",
    "deep_gemm": "DG_JIT_CACHE_DIR",
    "tilelang": "TILELANG_CACHE_DIR",
    "jitguard": "JITGUARD_CACHE_DIR",
}


def untrusted(caches: tuple[CacheLayer, ...]) -> dict[str, tuple[str, ...]]:
    """Each layer whose root a warm save would not publish (``fileio.trusted_root`` under
    ``fileio.PUBLISHED``), with why. A root that does not exist yet is fine. Reads only ``lstat``s."""
    found: dict[str, tuple[str, ...]] = {}
    for cache in caches:
        _real, reasons = fileio.trusted_root(cache.root, fileio.PUBLISHED)
        if reasons:
            found[cache.name] = reasons
    return found
