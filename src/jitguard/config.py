"""jitguard's settings, read from JITGUARD_* environment variables and command-line flags, and the one place
that parses and formats them (sizes, durations, job counts, store URLs). Every variable is in one table,
``VARIABLES`` (kind, accepted values, default, meaning), and read through it (``read``); README.md's tables are
generated from it (``python -m jitguard.config README.md``). Malformed or out-of-range values raise ConfigError
(exit code 2) naming the variable or flag, the value and what it accepts; they never fall back silently."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

from jitguard.errors import ConfigError

GDN_BACKENDS = ("auto", "flashinfer", "triton", "torch")
GDN_VARIANTS = ("auto", "all")  # FlashInfer's nvcc GDN module: the instances calls need, or every one
COMPILER_CACHES = ("auto", "sccache", "off")
CGROUPS = ("auto", "v2", "freezer", "off")  # supervise.build_cgroup
# auto: restore when JITGUARD_SHARE is set, save when JITGUARD_SHARE_PUBLISH=1; require: the same, and a compile
# in a layer the restored snapshot covers is a must-hit miss, logged as an error (jitguard.ledger)
WARM_MODES = ("auto", "require", "off")
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


STORE_SCHEMES = ("file", "s3", "gs")
_STORE_URL_RE = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://(.*)$", re.ASCII)
_NAME_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,99}", re.ASCII)
_ARCH_RE = re.compile(r"\d+\.\d+[af]?", re.ASCII)


def parse_store_url(text: str, *, name: str = "JITGUARD_SHARE") -> str:
    """An artifact store URL, stripped: ``file:///abs/path``, ``s3://bucket/prefix``, ``gs://bucket/prefix``
    (any other fsspec scheme passes through). ``file://relative/dir`` is refused: in a URL ``relative`` is a
    host name, and fsspec would quietly put the store under the current directory."""
    url = text.strip()
    m = _STORE_URL_RE.match(url)
    if not m:
        where = os.path.abspath(url) if url else "/path/of/the/store"
        raise ConfigError(
            name, text, f"a store URL such as file://{where}, s3://bucket/prefix or gs://bucket/prefix"
        )
    scheme, rest = m.group(1).lower(), m.group(2)
    if scheme in ("file", "local"):
        host, _, path = rest.partition("/")
        if host not in ("", "localhost"):
            raise ConfigError(
                name,
                text,
                f"a file URL with an absolute path, such as file:///{rest} or file://{os.path.abspath(rest)} "
                f"(in file://{host}/..., {host!r} is a host name, not a directory)",
            )
        if not path.strip("/"):
            raise ConfigError(name, text, "a file URL naming a directory, such as file:///shared/jitguard")
    elif not rest.strip("/"):
        raise ConfigError(name, text, f"a store URL with a bucket or path, such as {scheme}://bucket/prefix")
    return url


@dataclass(frozen=True)
class Variable:
    """One ``JITGUARD_*`` variable: its value's kind, what it accepts, its default and what it does.

    ``scope``: ``setting`` (a user's, documented in README.md "Settings"), ``internal`` (jitguard sets it for
    the processes it starts), ``tests`` (read by the test suite and .ci/, never by the package)."""

    name: str
    kind: str  # flag | choice | duration | memory | size | count | name | arch | url | path | text
    default: str
    meaning: str
    choices: tuple[str, ...] = ()
    scope: str = "setting"

    @property
    def accepted(self) -> str:
        """The accepted values, as the error and the docs say them."""
        return {
            "flag": "1 or 0 (also true/false, yes/no, on/off)",
            "choice": "one of " + ", ".join(self.choices),
            "duration": "a positive duration: seconds, or 90s, 10m, 1h",
            "memory": "a positive size such as 32G, or a percentage such as 75%",
            "size": "a positive size such as 6G or 512M",
            "count": "a whole number, such as 4",
            "name": "a name of letters, digits, '.', '_' and '-'",
            "arch": "a compute capability such as 9.0 or 9.0a",
            "url": "a store URL: file:///abs/path, s3://bucket/prefix, gs://bucket/prefix",
            "path": "a path",
            "text": "any text",
        }[self.kind]

    def parse(self, raw: str) -> Any:
        """The value of ``raw`` (not empty), or ConfigError naming the variable, the value and what it accepts."""
        kind, name = self.kind, self.name
        if kind == "flag":
            return _flag(raw.strip(), name)
        if kind == "choice":
            value = raw.strip().lower()
            if value not in self.choices:
                raise ConfigError(name, raw, self.accepted)
            return value
        if kind in ("duration", "size"):
            amount: float = (parse_duration if kind == "duration" else parse_size)(raw, name=name)
            if amount <= 0:
                raise ConfigError(name, raw, self.accepted)
            return amount
        if kind == "memory":
            spec = parse_memory_spec(raw, name=name)
            if spec.bytes is not None and spec.bytes <= 0:
                raise ConfigError(name, raw, self.accepted)
            return spec
        if kind == "count":
            if not _JOBS_RE.match(raw):
                raise ConfigError(name, raw, self.accepted)
            return int(raw)
        if kind in ("name", "arch"):
            if not (_NAME_RE if kind == "name" else _ARCH_RE).fullmatch(raw.strip()):
                raise ConfigError(name, raw, self.accepted)
            return raw.strip()
        if kind == "url":
            return parse_store_url(raw, name=name)
        if kind == "path":
            return Path(raw).expanduser()
        return raw


def _v(name: str, kind: str, default: str, meaning: str, *choices: str, scope: str = "setting") -> Variable:
    return Variable(f"JITGUARD_{name}", kind, default, meaning, tuple(choices), scope)


# Every JITGUARD_* variable jitguard or its tests read. README.md's "Settings" table is generated from the
# settings (`python -m jitguard.config`); tests/unit/cli/test_variables.py keeps the two, and src/, in step.
VARIABLES: dict[str, Variable] = {
    v.name: v
    for v in (
        _v("DISABLE", "flag", "`0`", "`1` turns jitguard's hooks and the vLLM and SGLang plugins off"),
        _v("GDN_BACKEND", "choice", "`auto`", "naming one backend is strict (no fallback)", *GDN_BACKENDS),
        _v(
            "GDN_VARIANTS",
            "choice",
            "`auto`",
            "`auto`: FlashInfer's nvcc GDN module is built from only the instances calls need; `all`: "
            "FlashInfer's full module",
            *GDN_VARIANTS,
        ),
        _v(
            "MEMORY_BUDGET",
            "memory",
            "available memory (cgroup-aware)",
            "memory all concurrent compile jobs on this host may use together",
        ),
        _v("JOB_MEMORY", "size", "learned per module, else 5.7 GiB", "memory one compile job needs"),
        _v("BUILD_TIMEOUT", "duration", "`1h`", "overall limit for one build"),
        _v("STALL_TIMEOUT", "duration", "`10m`", "a build with no progress for this long is stopped"),
        _v(
            "LOCK_TIMEOUT",
            "duration",
            "`1h`",
            "how long to wait for another process building the same module or manifest",
        ),
        _v(
            "PREFLIGHT_TIMEOUT",
            "duration",
            "`120s`",
            "how long an engine plugin's pre-flight may take before the engine's own choices stand "
            "([docs/failsafe.md](docs/failsafe.md)); a malformed value is the default, said once",
        ),
        _v(
            "CGROUP",
            "choice",
            "`auto`",
            "where each build attempt runs: `auto` (a cgroup v2 child with `cgroup.kill`, else a cgroup v1 "
            "freezer child, where this process may make one), `v2`, `freezer`, or `off`; see "
            "docs/reliability.md",
            *CGROUPS,
        ),
        _v(
            "CACHE_DIR",
            "path",
            "`$XDG_CACHE_HOME/jitguard` or `~/.cache/jitguard`",
            "failure cache, build logs, compile slots; created 0700, trusted like `~/.ssh` (see "
            "[docs/reliability.md](docs/reliability.md)); keep it on local disk: on a network file system "
            "(NFS, Lustre, ...) its locks and compile slots move to `$TMPDIR/jitguard-<uid>` (or `/tmp`, "
            "`/dev/shm`), with one warning",
        ),
        _v(
            "FAILURE_TTL",
            "duration",
            "`168h`",
            "how long a cached build outcome counts before the build is tried again",
        ),
        _v(
            "COMPILER_CACHE",
            "choice",
            "`auto`",
            "`sccache`: every supervised compile through sccache with its own `SCCACHE_*` backend; `auto`: the "
            "same when an sccache backend variable (`SCCACHE_DIR`, `SCCACHE_REDIS_ENDPOINT`, `SCCACHE_BUCKET`, "
            "`SCCACHE_GCS_BUCKET`, ...) is set; `off` ([docs/fleet.md](docs/fleet.md))",
            *COMPILER_CACHES,
        ),
        _v("SCCACHE", "path", "`sccache` on PATH, else beside the Python", "the sccache executable"),
        _v(
            "SHARE",
            "url",
            "unset",
            "artifact store URL: a module another host published is fetched (sha256-verified) instead of "
            "built",
        ),
        _v(
            "SHARE_PUBLISH",
            "flag",
            "`0`",
            "`1`: a module a guarded build compiled is also published to `JITGUARD_SHARE` (give the store's "
            "write access to build hosts only)",
        ),
        _v(
            "SHARE_TIMEOUT",
            "duration",
            "`120s`",
            "bound on each store call, and on a whole warm restore on a host (lock wait included); a store that "
            "does not answer is given up on, with one warning",
        ),
        _v(
            "WARM",
            "choice",
            "`auto`",
            "`auto`: with `JITGUARD_SHARE` set, the engine plugins restore the warm snapshot at start (one "
            "process per host) and, with `JITGUARD_SHARE_PUBLISH=1`, save it once the engine is ready; `require`: the "
            "same, and any compile in a layer the restored (or baked-in) snapshot covers is a must-hit miss, logged "
            "as an error with its cause and failing `jitguard starts --check`; `off`: neither "
            "([docs/starts.md](docs/starts.md))",
            *WARM_MODES,
        ),
        _v(
            "WARM_NAME",
            "name",
            "`default`",
            "which snapshot of this software stack and GPU arch (one per deployment, say)",
        ),
        _v("WARM_ARCH", "arch", "the GPU's", "the GPU arch of the snapshot where no GPU can be asked"),
        _v(
            "SIGNING_KEY",
            "path",
            "unset",
            "path of the ed25519 private key (`jitguard warm keygen`; the user's own, mode 0600) that signs "
            "every manifest this host saves or publishes ([docs/fleet.md](docs/fleet.md#signed-snapshots))",
        ),
        _v(
            "TRUSTED_KEYS",
            "text",
            "unset",
            "public key lines (`jitguard-ed25519:<id>:<hex>`, comma-separated; several for rotation) or the "
            "absolute path of a file of them: a manifest from the store not signed by one of them is refused; "
            "unset: any manifest is accepted, signed or not",
        ),
        _v(
            "CUTEDSL_CACHE",
            "flag",
            "`1`",
            "`0`: FlashInfer's CuTeDSL kernels (GDN prefill from 0.6.14) are compiled in every process again, "
            "as without jitguard, instead of once per host ([docs/cutedsl.md](docs/cutedsl.md))",
        ),
        _v(
            "STARTS_KEEP",
            "count",
            "`20`",
            "how many engine starts' ledgers `$JITGUARD_CACHE_DIR/starts/` keeps (`jitguard starts`; "
            "[docs/starts.md](docs/starts.md))",
        ),
        # Set by jitguard for the processes it starts (compile launchers, sccache wrappers).
        _v(
            "START_ID",
            "name",
            "",
            "the engine start a process records its ledger under: set by the start's first process, inherited "
            "by the ones it starts",
            scope="internal",
        ),
        _v("SLOTS_DIR", "path", "", "the host's compile slots, for a compile launcher", scope="internal"),
        _v("SLOT_COUNT", "count", "", "how many compile slots a build may hold", scope="internal"),
        _v("SLOT", "count", "", "the slot a compile holds", scope="internal"),
        _v("KILL_GRACE", "text", "`3`", "seconds between SIGTERM and SIGKILL of a compile", scope="internal"),
        _v("BUILD_OWNER", "text", "", "the build's jitguard process: `<pid>:<start>`", scope="internal"),
        _v("BUILD_MODULE", "text", "", "the module a compile belongs to", scope="internal"),
        _v("SCCACHE_ATTEMPT_DIR", "path", "", "where a compile reports its sccache use", scope="internal"),
        _v("SCCACHE_BIN", "path", "", "the sccache a compile runs through", scope="internal"),
        # Read by the test suite and .ci/ (tests/lib/release_preparation.py), never by the package.
        _v(
            "CI_ROOT",
            "path",
            "`/tmp/jitguard-ci`",
            "everything the tests prepare (engine releases, the package pool, FlashInfer releases, the release "
            "reports); the roots below default to directories in it",
            scope="tests",
        ),
        _v("VLLM_ROOT", "path", "`$JITGUARD_CI_ROOT/vllm`", "the vLLM releases", scope="tests"),
        _v("SGLANG_ROOT", "path", "`$JITGUARD_CI_ROOT/sglang`", "the SGLang releases", scope="tests"),
        _v(
            "POOL",
            "path",
            "`$JITGUARD_CI_ROOT/pool/<tag>`",
            "every package version, installed once",
            scope="tests",
        ),
        _v(
            "FLASHINFER_ROOT",
            "path",
            "`$JITGUARD_CI_ROOT`",
            "the FlashInfer releases (`flashinfer-<version>/`)",
            scope="tests",
        ),
        _v("TRITON_ROOT", "path", "`$JITGUARD_CI_ROOT/triton`", "Triton's test stand-ins", scope="tests"),
        _v("VLLM_VERSIONS", "text", "the tested ones", "which vLLM releases to prepare", scope="tests"),
        _v("SGLANG_VERSIONS", "text", "the tested ones", "which SGLang releases to prepare", scope="tests"),
        _v("CI_VENV", "path", "a temporary directory", "where `.ci/run` makes its venv", scope="tests"),
        _v("ENGINE_LOGS", "path", "unset", "GPU tests: each engine's whole output", scope="tests"),
        _v("ENGINE_LIMIT", "text", "`300`", "GPU tests: seconds one engine may take", scope="tests"),
        _v("ENGINE_BUDGET", "text", "`560`", "GPU tests: seconds a module's engines may take", scope="tests"),
        _v("TEST_BREAKAGE", "text", "unset", "tests: the fault a child process is given", scope="tests"),
    )
}


def read(name: str, env: Mapping[str, str] | None = None) -> Any:
    """The parsed value of the variable ``name`` (a key of VARIABLES), None when unset or empty; ConfigError
    when its value is not one it accepts."""
    variable = VARIABLES[name]
    raw = (os.environ if env is None else env).get(name)
    if raw is None or raw == "":
        return None
    return variable.parse(raw)


def problems(env: Mapping[str, str] | None = None) -> tuple[list[ConfigError], list[str]]:
    """Every malformed JITGUARD_* setting (as its ConfigError) and every JITGUARD_* name jitguard does not
    know (a typo reads as unset), for `jitguard doctor`."""
    env = os.environ if env is None else env
    errors: list[ConfigError] = []
    for name, variable in VARIABLES.items():
        if variable.scope == "tests":
            continue
        try:
            read(name, env)
        except ConfigError as exc:
            errors.append(exc)
    unknown = sorted(k for k in env if k.startswith("JITGUARD_") and k not in VARIABLES)
    return errors, unknown


def markdown(scope: str = "setting") -> str:
    """The variables of ``scope`` as a Markdown table (README.md's "Settings" are ``setting``)."""
    lines = ["| variable | default | accepts | meaning |", "|---|---|---|---|"]
    for v in VARIABLES.values():
        if v.scope == scope:
            accepts = ", ".join(f"`{c}`" for c in v.choices) if v.choices else v.accepted
            lines.append(f"| `{v.name}` | {v.default} | {accepts} | {v.meaning} |")
    return "\n".join(lines)


def default_cache_dir(env: Mapping[str, str] | None = None) -> Path:
    env = os.environ if env is None else env
    named: Path | None = read("JITGUARD_CACHE_DIR", env)
    if named is not None:
        return named
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
    share_timeout: float = 120.0  # JITGUARD_SHARE_TIMEOUT: bound on each store call and on a whole restore
    cutedsl_cache: bool = (
        True  # JITGUARD_CUTEDSL_CACHE: keep compiled CuTeDSL kernels (cutedsl.persisting_compile)
    )
    warm: str = (
        "auto"  # JITGUARD_WARM: restore/save engine-start JIT caches through the store (fleet.warm_transfer)
    )
    warm_name: str = "default"  # JITGUARD_WARM_NAME: which snapshot of this stack and arch
    warm_arch: str | None = None  # JITGUARD_WARM_ARCH: the GPU arch when no GPU can be asked (e.g. 9.0)
    signing_key: Path | None = None  # JITGUARD_SIGNING_KEY: private key that signs what this host publishes
    trusted_keys: str | None = None  # JITGUARD_TRUSTED_KEYS: public key lines or a file (fleet.signing)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        """Every setting from ``env`` (default os.environ), each read through ``VARIABLES``; the first
        malformed one raises ConfigError."""
        env = os.environ if env is None else env

        def get(name: str, default: Any) -> Any:
            value = read(f"JITGUARD_{name}", env)
            return default if value is None else value

        read("JITGUARD_CGROUP", env)  # read again where a build attempt starts; checked here, at first use
        return cls(
            disabled=get("DISABLE", False),
            gdn_backend=get("GDN_BACKEND", "auto"),
            gdn_variants=get("GDN_VARIANTS", "auto"),
            memory_budget=get("MEMORY_BUDGET", None),
            job_memory=get("JOB_MEMORY", None),
            build_timeout=get("BUILD_TIMEOUT", 3600.0),
            stall_timeout=get("STALL_TIMEOUT", 600.0),
            lock_timeout=get("LOCK_TIMEOUT", 3600.0),
            failure_ttl=get("FAILURE_TTL", 7 * 86400.0),
            cache_dir=default_cache_dir(env),
            compiler_cache=get("COMPILER_CACHE", "auto"),
            share_url=get("SHARE", None),
            share_publish=get("SHARE_PUBLISH", False),
            share_timeout=get("SHARE_TIMEOUT", 120.0),
            cutedsl_cache=get("CUTEDSL_CACHE", True),
            warm=get("WARM", "auto"),
            warm_name=get("WARM_NAME", "default"),
            warm_arch=get("WARM_ARCH", None),
            signing_key=get("SIGNING_KEY", None),
            # Read as it is set: an empty or blank list is refused where it is parsed (fleet.signing), never
            # taken as unset, which would accept any manifest.
            trusted_keys=env.get("JITGUARD_TRUSTED_KEYS"),
        )


def _flag(raw: str | None, name: str) -> bool:
    if raw is None:
        return False
    if raw.lower() not in ("0", "1", "true", "false", "yes", "no", "on", "off"):
        raise ConfigError(name, raw, "1 or 0")
    return raw.lower() in ("1", "true", "yes", "on")


def _marks(scope: str) -> tuple[str, str]:
    return (
        f"<!-- {scope} variables: generated from jitguard.config.VARIABLES by `python -m jitguard.config "
        "README.md` -->",
        f"<!-- end of {scope} variables -->",
    )


def rewrite(text: str) -> str:
    """``text`` (README.md) with each variables table between its marks generated again: the settings, and
    the test suite's own."""
    for scope in ("setting", "tests"):
        begin, end = _marks(scope)
        head, rest = text.split(begin, 1)
        _, tail = rest.split(end, 1)
        text = f"{head}{begin}\n{markdown(scope)}\n{end}{tail}"
    return text


if __name__ == "__main__":
    import sys

    if len(sys.argv) > 1:
        readme = Path(sys.argv[1])
        readme.write_text(rewrite(readme.read_text(encoding="utf-8")), encoding="utf-8")
    else:
        print(markdown())
