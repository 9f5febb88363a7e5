"""The guarded build of one FlashInfer nvcc JIT module (a ``JitSpec``): what replaces its silent build+load.

Under the module's lock: fetch from the store, the failure cache and pre-flight before a cold build, the
supervised build (classified and recorded when it fails), the GLIBCXX check before the load, the outcome
recorded (``build_spec``). Called by the FlashInfer hook and by ``jitguard build flashinfer-gdn``; nothing
here imports flashinfer: the spec is handed in.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import shutil
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from jitguard.boundary.process_facts import facts_for
from jitguard.config import Settings, format_duration, parse_jobs
from jitguard.errors import BuildFailed, CachedBuildFailure, UsageError
from jitguard.facts.build_identity import of_facts
from jitguard.findings.catalog import make
from jitguard.findings.checks import JIT_BUILD_DOOM, preflight
from jitguard.findings.checks_toolchain import check_built_library
from jitguard.findings.classify import classify
from jitguard.findings.model import Finding
from jitguard.fleet import module_share
from jitguard.fleet.artifact_store import ArtifactKey
from jitguard.fleet.module_share import Share, ShareOutcome, spec_variant
from jitguard.fleet.signing import Trust
from jitguard.ledger import tally
from jitguard.locks.visible_lock import ModuleLock
from jitguard.state.failure_cache import FailureCache, ttl_from_env
from jitguard.supervise.build_options import BuildOptions
from jitguard.supervise.manifest import nothing_to_do
from jitguard.supervise.runner import default_log_path, run_ninja

if TYPE_CHECKING:
    from jitguard.facts import Facts
    from jitguard.supervise.build_options import BuildResult


# Pre-flight codes that doom any FlashInfer nvcc build (compile or link) now; other pre-flight findings are
# about running the kernel (no GPU on a build host is fine) or about other backends.
BUILD_BLOCKING_CODES = JIT_BUILD_DOOM | {"memory-too-small", "disk-full", "cache-dir-unwritable"}
# Codes that doom only the GDN prefill modules (nvcc < 12.6 cannot compile the SM90 GDN kernel).
GDN_BLOCKING_CODES = frozenset({"nvcc-too-old"})
GDN_MODULE_PREFIX = "gdn_prefill"


@dataclass(frozen=True)
class BuiltModule:
    """The outcome of ``build_spec``: where the library is and what it took."""

    module: str
    so_path: Path
    status: Literal["built", "up-to-date", "fetched"]
    log_path: Path | None
    result: BuildResult | None
    notes: tuple[Finding, ...]  # non-blocking findings (warnings, info) worth showing
    waited_s: float
    took_over_from_pid: int | None = None
    loaded: Any = field(default=None, compare=False, repr=False)
    shared: tuple[ShareOutcome, ...] = ()  # what the artifact store did (fetch, publish)


def build_spec(
    spec: Any,
    *,
    load: Callable[[Path], Any] | None = None,
    options: BuildOptions | None = None,
    env: Mapping[str, str] | None = None,
    verify: Callable[[Path], None] | None = None,
    publish: str | None = None,
) -> BuiltModule:
    """Build (if needed), check and optionally load one FlashInfer ``JitSpec``, under the module's lock
    (``ModuleLock`` on FlashInfer's own lock file, with visible waits):

    1. nothing to build (the ``.so`` exists and ``ninja -n`` has no work): go to 4;
    2. cold build only: with a store (``fleet.module_share``), fetch the module first (a host that cannot build
       may still fetch); then the failure cache (this module already failed in this very environment ->
       ``CachedBuildFailure``) and pre-flight (what dooms any build of it -> ``BuildFailed``, recorded);
    3. the build, through the supervised runner; a failure is classified and recorded unless its cause is
       transient (timeout, stall, interrupt, disk, lock); published after a build when asked (``publish``,
       ``JITGUARD_SHARE_PUBLISH=1``); a store that fails is one warning and a local build;
    4. the exact GLIBCXX check of the ``.so`` against this process's libstdc++ BEFORE it is loaded;
    5. the load (optional: the prebuild CLI builds on hosts that cannot load), and the outcome recorded.

    ``verify(so_path)`` runs after the checks and before the load (a partial GDN module's symbol check); what
    it raises propagates, nothing is recorded.

    Raises ``CachedBuildFailure`` / ``BuildFailed`` (with findings and the log path) or ``LockTimeout``.
    """
    given = env
    env = dict(os.environ if env is None else env)
    settings = Settings.from_env(env)
    module = str(spec.name)
    if env.get("FLASHINFER_DISABLE_JIT"):
        raise UsageError(
            f"FLASHINFER_DISABLE_JIT is set, so FlashInfer must not compile {module}; unset it to build"
        )
    cache_dir = settings.cache_dir
    failures = FailureCache(cache_dir, ttl=ttl_from_env(env))
    log_path = new_log_path(cache_dir, module)
    lock = ModuleLock(Path(spec.lock_path), module, timeout=settings.lock_timeout)
    started = time.monotonic()
    with lock:
        so_path = Path(spec.jit_library_path)
        if not spec.is_ninja_generated:
            spec.write_ninja()
        facts = facts_for(
            given
        )  # this process's facts, shared with the engine plugins, unless env is another
        digest = source_digest(spec)
        notes: list[Finding] = []
        result: BuildResult | None = None
        key = _Key(module, facts.fingerprint, digest)
        before = _mtime(so_path)
        shared: list[ShareOutcome] = []
        fetched = _fetched_here(spec, so_path, settings, facts, shared, cold=before is None)
        if not fetched and (before is None or ninja_has_work(Path(spec.build_dir), Path(spec.ninja_path))):
            if before is None:
                # A cold build is where a doomed environment costs the most (all TUs compile, then the link
                # fails). An existing library is never blocked by pre-flight: it may have been built elsewhere
                # (a Docker build step with a link stub) and only needs at most an incremental rebuild.
                notes += check_before_build(module, facts, failures, source_digest=digest)
            lock.set_log_path(log_path)
            result = _run_build(spec, key, failures, options, settings, log_path, facts)
        status: Literal["built", "up-to-date", "fetched"] = (
            "up-to-date" if before == _mtime(so_path) else "built"
        )
        if fetched and before is None:
            status = "fetched"
        notes += _check_library(key, so_path, facts, failures, log_path if result else None)
        if verify is not None:
            verify(so_path)
        loaded = _load(key, so_path, failures, load) if load is not None else None
        if status == "built" or failures.get(module, facts.fingerprint) is not None:
            failures.record_success(module, facts.fingerprint, source_digest=digest)
        built = BuiltModule(
            module=module,
            so_path=so_path,
            status=status,
            log_path=log_path if result else None,
            result=result,
            notes=tuple(notes),
            waited_s=lock.waited,
            took_over_from_pid=lock.took_over_from.pid if lock.took_over_from else None,
            loaded=loaded,
            shared=tuple(shared),
        )
    _count(built, so_path, time.monotonic() - started)
    # After the lock: the other ranks need not wait for an upload.
    target = publish or (settings.share_url if settings.share_publish and built.status == "built" else None)
    if target:
        built = dataclasses.replace(
            built, shared=(*built.shared, _publish(spec, target, settings, facts, so_path))
        )
    return built


def _count(built: BuiltModule, so_path: Path, seconds: float) -> None:
    """The start ledger's ``flashinfer-nvcc`` layer: built here, found up to date, or fetched from the store."""
    outcome = {"built": "compiled", "up-to-date": "cached", "fetched": "restored"}[built.status]
    tally.phase("lock_waits", built.waited_s)
    tally.count(
        "flashinfer-nvcc",
        outcome,
        seconds=max(0.0, seconds - built.waited_s),
        what=built.module,
        cause=f"FlashInfer's workspace held no up-to-date {so_path.name} ({so_path.parent})",
    )


def _publish(spec: Any, url: str, settings: Settings, facts: Facts, so_path: Path) -> ShareOutcome:
    """Publish the built library; never raises (the build itself stands whatever the store does)."""
    try:
        return _share(spec, url, settings, facts).publish({so_path.name: so_path})
    except Exception as exc:
        return ShareOutcome("publish", "failed", url, f"{type(exc).__name__}: {exc}")


def _share(spec: Any, url: str, settings: Settings, facts: Facts) -> Share:
    key = ArtifactKey(str(spec.name), of_facts(facts), spec_variant(spec))
    return Share(url, key, settings.share_timeout, Trust.from_settings(settings))


def _fetched_here(
    spec: Any, so_path: Path, settings: Settings, facts: Facts, shared: list[ShareOutcome], *, cold: bool
) -> bool:
    """True when the library in place came from the store for this variant: fetched now (a cold build with a
    store configured) or earlier (its marker still matches). Never raises: a fault means a local build."""
    try:
        if not cold:
            if not module_share.has_marker(so_path):
                return False
            return module_share.is_fetched([so_path], module_share.spec_variant(spec))
        if not settings.share_url:
            return False
        outcome = _share(spec, settings.share_url, settings, facts).fetch(so_path.parent)
    except Exception as exc:  # the store is a help, never a reason to fail
        import logging

        logging.getLogger("jitguard.share").warning("jitguard: the artifact store was not used: %s", exc)
        return False
    shared.append(outcome)
    return outcome.action == "fetched" and so_path.exists()


def check_before_build(
    module: str, facts: Facts, failures: FailureCache, *, source_digest: str | None = None
) -> list[Finding]:
    """The failure cache, then pre-flight. Raises when the build is doomed; returns the non-blocking notes."""
    cached = failures.get(module, facts.fingerprint, source_digest=source_digest)
    if cached is not None:
        raise CachedBuildFailure(cached.module, cached.findings, cached.log_path, ago=_ago(cached.age()))

    findings = preflight(facts, "flashinfer")
    blocking = [f for f in findings if f.blocking and blocks_build(module, f.code)]
    if blocking:
        failures.record_failure(module, facts.fingerprint, blocking, source_digest=source_digest)
        raise BuildFailed(
            module,
            blocking,
            None,
            detail="pre-flight found that it cannot succeed here",
            outcome="not started",
        )
    return [f for f in findings if not f.blocking]


def source_digest(spec: Any) -> str:
    """What is being built: the spec's own flags and the bytes of its listed sources. Headers are not read
    (FlashInfer's come with its version, which is in the environment fingerprint)."""
    digest = hashlib.sha256()
    for part in (
        spec.name,
        spec.extra_cflags,
        spec.extra_cuda_cflags,
        spec.extra_ldflags,
        spec.extra_include_dirs,
    ):
        digest.update(repr(part).encode())
    for source in spec.sources:
        digest.update(str(source).encode())
        try:
            digest.update(Path(source).read_bytes())
        except OSError:
            digest.update(b"<unreadable>")
    return digest.hexdigest()[:32]


def blocks_build(module: str, code: str) -> bool:
    """Whether a pre-flight finding ``code`` concerns building ``module`` (as opposed to running it)."""
    return code in BUILD_BLOCKING_CODES or (
        module.startswith(GDN_MODULE_PREFIX) and code in GDN_BLOCKING_CODES
    )


def run_ninja_for_flashinfer(workdir: Path, ninja_file: Path, verbose: bool = False) -> BuildResult:
    """Stands in for ``flashinfer.jit.cpp_ext.run_ninja`` (FlashInfer's AOT ``build_jit_specs``, or a direct
    ``JitSpec.build``): the same ninja build, through jitguard's runner. ``verbose`` is FlashInfer's flag to
    echo ninja's output; the runner always keeps the full log and reports progress itself."""
    settings = Settings.from_env()
    module = Path(workdir).name
    Path(workdir).mkdir(parents=True, exist_ok=True)
    return run_ninja(
        Path(workdir),
        Path(ninja_file),
        module=module,
        options=default_options(settings, module),
        log_path=new_log_path(settings.cache_dir, module),
    )


def default_options(settings: Settings, module: str) -> BuildOptions:
    """Build options from JITGUARD_* (and FlashInfer's MAX_JOBS, which a user may already rely on). The runner
    itself uses the per-job memory learned for ``module`` when JITGUARD_JOB_MEMORY is not set."""
    max_jobs = os.environ.get("MAX_JOBS", "")
    jobs = parse_jobs(max_jobs, name="MAX_JOBS") if max_jobs.strip() else None
    return BuildOptions.from_settings(settings, jobs=jobs, backend="flashinfer")


def ninja_has_work(build_dir: Path, ninja_file: Path) -> bool:
    """``ninja -n``: would a build of this ninja file run anything? True when it cannot tell."""
    ninja = shutil.which("ninja")
    if ninja is None or not ninja_file.exists():
        return True
    return not nothing_to_do(ninja, build_dir, ninja_file)


def new_log_path(cache_dir: Path, module: str) -> Path:
    return default_log_path(cache_dir, module)


@dataclass(frozen=True)
class _Key:
    module: str
    fingerprint: str
    digest: str


def _run_build(
    spec: Any,
    key: _Key,
    failures: FailureCache,
    options: BuildOptions | None,
    settings: Settings,
    log_path: Path,
    facts: Facts,
) -> BuildResult:
    # The runner directly, never FlashInfer's ``JitSpec.build``: that calls whatever ``run_ninja`` its module
    # holds, which is stock FlashInfer (unbounded, unwatched) whenever the hook is not installed.
    try:
        return run_ninja(
            Path(spec.build_dir),
            Path(spec.ninja_path),
            module=key.module,
            options=dataclasses.replace(options or default_options(settings, key.module), facts=facts),
            log_path=log_path,
        )
    except BuildFailed as exc:
        _record(failures, key, exc.findings, exc.log_path)
        raise


def _check_library(
    key: _Key, so_path: Path, facts: Facts, failures: FailureCache, log_path: Path | None
) -> list[Finding]:
    log_text = str(log_path) if log_path else None
    if not so_path.exists():
        raise BuildFailed(
            key.module, [_missing_library(key.module, so_path)], log_text, detail="no library after the build"
        )

    findings = check_built_library(so_path, facts.libstdcxx)
    blocking = [f for f in findings if f.blocking]
    if blocking:
        _record(failures, key, blocking, log_text)
        raise BuildFailed(
            key.module,
            blocking,
            log_text,
            detail=str(so_path),
            outcome="gave a library that would not load here",
        )
    return findings


def _load(key: _Key, so_path: Path, failures: FailureCache, load: Callable[[Path], Any]) -> Any:
    try:
        return load(so_path)
    except Exception as exc:
        found = classify(str(exc), None)
        # Only a diagnosed cause is worth remembering; an unknown load error may be this process's state.
        if any(f.code != "build-failed" for f in found):
            _record(failures, key, found, None)
        raise BuildFailed(
            key.module, found, None, detail=f"{so_path}: {exc}", outcome="gave a library that failed to load"
        ) from exc


def _record(
    failures: FailureCache, key: _Key, findings: tuple[Finding, ...] | list[Finding], log_path: str | None
) -> None:
    # The cache itself declines transient causes (timeout, stall, interrupt, disk, lock).
    failures.record_failure(key.module, key.fingerprint, list(findings), log_path, source_digest=key.digest)


def _mtime(path: Path) -> int | None:
    try:
        return path.stat().st_mtime_ns
    except OSError:
        return None


def _missing_library(module: str, so_path: Path) -> Finding:
    return make(
        "build-failed",
        backend="flashinfer",
        evidence=[f"missing: {so_path}"],
        module=module,
        log_path=str(so_path.parent),
        returncode=0,
    )


def _ago(seconds: float) -> str:
    return f"{format_duration(seconds)} ago"
