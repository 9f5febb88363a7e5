"""jitguard's settings, read from JITGUARD_* environment variables and command-line flags, and the one place
that parses and formats them (sizes, durations, job counts). Malformed or out-of-range values raise ConfigError
(exit code 2) naming the variable or flag, the value and the allowed range; they never fall back silently."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path

from jitguard.errors import ConfigError

GDN_BACKENDS = ("auto", "flashinfer", "triton", "torch")
GDN_VARIANTS = ("auto", "all")  # FlashInfer's nvcc GDN module: the instances calls need, or every one
COMPILER_CACHES = ("auto", "sccache", "off")
WARM_MODES = ("auto", "off")  # auto: restore when JITGUARD_SHARE is set, save when JITGUARD_SHARE_PUBLISH=1
MAX_JOBS = 1024  # parallel compile jobs; also the number of host-wide slots one build may ask for
MAX_SIZE = 1024**5  # 1 PiB: more memory than any host has, and a bound that 400-digit values cannot overflow
MAX_DURATION_S = 366 * 86400.0  # one year

_SIZE_UNITS = {"": 1, "B": 1, "K": 1024, "M": 1024**2, "G": 1024**3, "T": 1024**4}
# ASCII digits only: str.isdigit() and \d accept '²' or '٣', which int() then rejects or reads unexpectedly.
_SIZE_RE = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*([KMGT]?)(?:I?B)?\s*$", re.IGNORECASE | re.ASCII)
_DURATION_RE = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*(s|m|h)?\s*$", re.IGNORECASE | re.ASCII)
_JOBS_RE = re.compile(r"^\s*[0-9]+\s*$", re.ASCII)


@dataclass(frozen=True)
class MemorySpec:
    """A memory amount: absolute bytes, or a fraction of what is available."""

    bytes: int | None = None
    fraction: float | None = None

    def resolve(self, available_bytes: int) -> int:
        if self.bytes is not None:
            return self.bytes
        assert self.fraction is not None
        return int(available_bytes * self.fraction)

    def __str__(self) -> str:
        if self.bytes is not None:
            return format_bytes(self.bytes)
        return f"{(self.fraction or 0) * 100:g}%"


def parse_size(text: str, *, name: str = "size") -> int:
    """'32G', '512M', '6GiB', '1024' (bytes) -> bytes, at most ``MAX_SIZE``."""
    m = _SIZE_RE.match(text)
    if not m:
        raise ConfigError(name, text, "a size such as 32G, 512M or 6GiB")
    value = Decimal(m.group(1)) * _SIZE_UNITS[m.group(2).upper()]  # exact: no float overflow to infinity
    if value > MAX_SIZE:
        raise ConfigError(name, text, "a size of at most 1024T (1 PiB), such as 32G")
    return int(value)


def parse_memory_spec(text: str, *, name: str = "memory budget") -> MemorySpec:
    """'32G' or '75%'."""
    stripped = text.strip()
    if stripped.endswith("%"):
        try:
            pct = float(stripped[:-1])
        except ValueError:
            raise ConfigError(name, text, "a size such as 32G or a percentage such as 75%") from None
        if not 0 < pct <= 100:
            raise ConfigError(name, text, "a percentage between 0 and 100, such as 75%")
        return MemorySpec(fraction=pct / 100)
    if not _SIZE_RE.match(stripped):
        raise ConfigError(name, text, "a size such as 32G or a percentage such as 75%")
    return MemorySpec(bytes=parse_size(stripped, name=name))


def parse_duration(text: str, *, name: str = "duration") -> float:
    """'600', '90s', '10m', '1.5h' -> seconds."""
    m = _DURATION_RE.match(text)
    if not m:
        raise ConfigError(name, text, "a duration in seconds, or with a unit: 90s, 10m, 1h")
    scale = {"s": 1, "m": 60, "h": 3600}[(m.group(2) or "s").lower()]
    value = Decimal(m.group(1)) * scale
    if value > Decimal(MAX_DURATION_S):
        raise ConfigError(name, text, "a duration of at most 8784h (one year), such as 90m")
    return float(value)


def parse_jobs(text: str, *, name: str = "--jobs") -> int | None:
    """'auto' -> None (plan from the memory budget); '4' -> 4, from 1 to ``MAX_JOBS``."""
    if text.strip().lower() == "auto":
        return None
    if not _JOBS_RE.match(text) or not 1 <= int(text) <= MAX_JOBS:
        raise ConfigError(name, text, f"auto or a whole number of jobs from 1 to {MAX_JOBS}, such as 4")
    return int(text)


def format_duration(seconds: float) -> str:
    """A duration for people: '42 s', '7.5 min', '3.2 h', '2.0 d'."""
    seconds = max(0.0, seconds)
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.1f} min"
    if seconds < 172800:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} d"


def format_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


def default_cache_dir(env: Mapping[str, str] | None = None) -> Path:
    env = os.environ if env is None else env
    if env.get("JITGUARD_CACHE_DIR"):
        return Path(env["JITGUARD_CACHE_DIR"]).expanduser()
    base = env.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base).expanduser() / "jitguard"


@dataclass(frozen=True)
class Settings:
    """Every JITGUARD_* setting, parsed. Defaults are documented in README.md."""

    disabled: bool = False
    gdn_backend: str = "auto"
    gdn_variants: str = "auto"
    memory_budget: MemorySpec | None = None
    job_memory: int | None = None
    build_timeout: float = 3600.0
    stall_timeout: float = 600.0
    lock_timeout: float = 3600.0
    failure_ttl: float = 7 * 86400.0
    cache_dir: Path = Path("~/.cache/jitguard")
    compiler_cache: str = "auto"  # JITGUARD_COMPILER_CACHE (fleet.compiler_cache)
    share_url: str | None = None  # JITGUARD_SHARE: the artifact store fetched before a build
    share_publish: bool = False  # JITGUARD_SHARE_PUBLISH: also publish what a guarded build made
    share_timeout: float = 120.0  # JITGUARD_SHARE_TIMEOUT: bound on one fetch or publish
    cutedsl_cache: bool = (
        True  # JITGUARD_CUTEDSL_CACHE: keep compiled CuTeDSL kernels (flashinfer_jit.cutedsl_cache)
    )
    warm: str = "auto"  # JITGUARD_WARM: restore/save engine-start JIT caches through the store (fleet.warm)
    warm_name: str = "default"  # JITGUARD_WARM_NAME: which snapshot of this stack and arch
    warm_arch: str | None = None  # JITGUARD_WARM_ARCH: the GPU arch when no GPU can be asked (e.g. 9.0)
    signing_key: Path | None = None  # JITGUARD_SIGNING_KEY: private key that signs what this host publishes
    trusted_keys: str | None = None  # JITGUARD_TRUSTED_KEYS: public key lines or a file (fleet.signing)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        env = os.environ if env is None else env

        def get(name: str) -> str | None:
            value = env.get(name)
            return value if value not in (None, "") else None

        disabled = _flag(get("JITGUARD_DISABLE"), "JITGUARD_DISABLE")
        share_publish = _flag(get("JITGUARD_SHARE_PUBLISH"), "JITGUARD_SHARE_PUBLISH")
        cutedsl_cache = get("JITGUARD_CUTEDSL_CACHE") is None or _flag(
            get("JITGUARD_CUTEDSL_CACHE"), "JITGUARD_CUTEDSL_CACHE"
        )
        compiler_cache = (get("JITGUARD_COMPILER_CACHE") or "auto").strip().lower()
        if compiler_cache not in COMPILER_CACHES:
            raise ConfigError(
                "JITGUARD_COMPILER_CACHE", compiler_cache, "one of " + ", ".join(COMPILER_CACHES)
            )
        share_url = (get("JITGUARD_SHARE") or "").strip() or None
        warm = (get("JITGUARD_WARM") or "auto").strip().lower()
        if warm not in WARM_MODES:
            raise ConfigError("JITGUARD_WARM", warm, "one of " + ", ".join(WARM_MODES))
        warm_name = (get("JITGUARD_WARM_NAME") or "default").strip()
        if not re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,99}", warm_name):
            raise ConfigError("JITGUARD_WARM_NAME", warm_name, "a name of letters, digits, '.', '_' and '-'")
        warm_arch = (get("JITGUARD_WARM_ARCH") or "").strip() or None
        if warm_arch is not None and not re.fullmatch(r"\d+\.\d+[af]?", warm_arch):
            raise ConfigError("JITGUARD_WARM_ARCH", warm_arch, "a compute capability such as 9.0")

        backend = (get("JITGUARD_GDN_BACKEND") or "auto").lower()
        if backend not in GDN_BACKENDS:
            raise ConfigError("JITGUARD_GDN_BACKEND", backend, "one of " + ", ".join(GDN_BACKENDS))

        variants = (get("JITGUARD_GDN_VARIANTS") or "auto").lower()
        if variants not in GDN_VARIANTS:
            raise ConfigError("JITGUARD_GDN_VARIANTS", variants, "auto or all")

        budget_raw = get("JITGUARD_MEMORY_BUDGET")
        job_raw = get("JITGUARD_JOB_MEMORY")
        timeouts = {}
        for key, default in (
            ("BUILD_TIMEOUT", 3600.0),
            ("STALL_TIMEOUT", 600.0),
            ("LOCK_TIMEOUT", 3600.0),
            ("FAILURE_TTL", 7 * 86400.0),
            ("SHARE_TIMEOUT", 120.0),
        ):
            raw = get(f"JITGUARD_{key}")
            value = parse_duration(raw, name=f"JITGUARD_{key}") if raw is not None else default
            if value <= 0:
                raise ConfigError(f"JITGUARD_{key}", raw or "", "a positive duration")
            timeouts[key.lower()] = value
        budget = parse_memory_spec(budget_raw, name="JITGUARD_MEMORY_BUDGET") if budget_raw else None
        if budget is not None and budget.bytes is not None and budget.bytes <= 0:
            raise ConfigError(
                "JITGUARD_MEMORY_BUDGET", budget_raw or "", "a positive size such as 32G, or 75%"
            )
        job_memory = parse_size(job_raw, name="JITGUARD_JOB_MEMORY") if job_raw else None
        if job_memory is not None and job_memory <= 0:
            raise ConfigError("JITGUARD_JOB_MEMORY", job_raw or "", "a positive size such as 6G")
        return cls(
            disabled=disabled,
            gdn_backend=backend,
            gdn_variants=variants,
            memory_budget=budget,
            job_memory=job_memory,
            cache_dir=default_cache_dir(env),
            compiler_cache=compiler_cache,
            share_url=share_url,
            share_publish=share_publish,
            cutedsl_cache=cutedsl_cache,
            warm=warm,
            warm_name=warm_name,
            warm_arch=warm_arch,
            # Parsed where they are used (fleet.signing): the key file and the key list are checked there.
            signing_key=Path(raw_key.strip()).expanduser()
            if (raw_key := get("JITGUARD_SIGNING_KEY"))
            else None,
            trusted_keys=get("JITGUARD_TRUSTED_KEYS"),  # white space alone is refused there, never "none"
            **timeouts,
        )


def _flag(raw: str | None, name: str) -> bool:
    if raw is None:
        return False
    if raw.lower() not in ("0", "1", "true", "false", "yes", "no", "on", "off"):
        raise ConfigError(name, raw, "1 or 0")
    return raw.lower() in ("1", "true", "yes", "on")
