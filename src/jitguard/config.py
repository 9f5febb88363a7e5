"""jitguard's settings, read from JITGUARD_* environment variables. Malformed values raise ConfigError
(exit code 2) naming the variable, the value and what is accepted; they never fall back silently."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from jitguard.errors import ConfigError

GDN_BACKENDS = ("auto", "flashinfer", "triton", "torch")

_SIZE_UNITS = {"": 1, "B": 1, "K": 1024, "M": 1024**2, "G": 1024**3, "T": 1024**4}
_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]?)(?:I?B)?\s*$", re.IGNORECASE)
_DURATION_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(s|m|h)?\s*$", re.IGNORECASE)


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
    """'32G', '512M', '6GiB', '1024' (bytes) -> bytes."""
    m = _SIZE_RE.match(text)
    if not m:
        raise ConfigError(name, text, "a size such as 32G, 512M or 6GiB")
    return int(float(m.group(1)) * _SIZE_UNITS[m.group(2).upper()])


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
    try:
        return MemorySpec(bytes=parse_size(stripped, name=name))
    except ConfigError:
        raise ConfigError(name, text, "a size such as 32G or a percentage such as 75%") from None


def parse_duration(text: str, *, name: str = "duration") -> float:
    """'600', '90s', '10m', '1.5h' -> seconds."""
    m = _DURATION_RE.match(text)
    if not m:
        raise ConfigError(name, text, "a duration in seconds, or with a unit: 90s, 10m, 1h")
    scale = {"s": 1, "m": 60, "h": 3600}[(m.group(2) or "s").lower()]
    return float(m.group(1)) * scale


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
    memory_budget: MemorySpec | None = None
    job_memory: int | None = None
    build_timeout: float = 3600.0
    stall_timeout: float = 600.0
    lock_timeout: float = 3600.0
    failure_ttl: float = 7 * 86400.0
    cache_dir: Path = Path("~/.cache/jitguard")

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        env = os.environ if env is None else env

        def get(name: str) -> str | None:
            value = env.get(name)
            return value if value not in (None, "") else None

        disabled_raw = get("JITGUARD_DISABLE")
        disabled = False
        if disabled_raw is not None:
            if disabled_raw.lower() not in ("0", "1", "true", "false", "yes", "no", "on", "off"):
                raise ConfigError("JITGUARD_DISABLE", disabled_raw, "1 or 0")
            disabled = disabled_raw.lower() in ("1", "true", "yes", "on")

        backend = (get("JITGUARD_GDN_BACKEND") or "auto").lower()
        if backend not in GDN_BACKENDS:
            raise ConfigError("JITGUARD_GDN_BACKEND", backend, "one of " + ", ".join(GDN_BACKENDS))

        budget_raw = get("JITGUARD_MEMORY_BUDGET")
        job_raw = get("JITGUARD_JOB_MEMORY")
        timeouts = {}
        for key, default in (
            ("BUILD_TIMEOUT", 3600.0),
            ("STALL_TIMEOUT", 600.0),
            ("LOCK_TIMEOUT", 3600.0),
            ("FAILURE_TTL", 7 * 86400.0),
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
            memory_budget=budget,
            job_memory=job_memory,
            cache_dir=default_cache_dir(env),
            **timeouts,
        )
