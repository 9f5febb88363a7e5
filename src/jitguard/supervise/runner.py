"""The supervised ninja build: memory-bounded, watched, retried at lower parallelism after an OOM kill.

``run_ninja`` is what FlashInfer's ``run_ninja`` becomes under jitguard, and what ``jitguard build ninja`` runs:
one build per manifest on the host, no process of it outliving the call, and a failure that says why
(docs/design.md "Build runner").
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import time
from pathlib import Path

from jitguard import fileio
from jitguard.config import MAX_JOBS, default_cache_dir, format_bytes
from jitguard.errors import BuildFailed, UsageError
from jitguard.facts import memory
from jitguard.facts.capacity import plan_jobs
from jitguard.fleet import compiler_cache
from jitguard.locks.visible_lock import ModuleLock
from jitguard.state.job_memory import JobMemoryStore
from jitguard.supervise import build_time, manifest, ninja_log, slots
from jitguard.supervise.attempt import note as _note
from jitguard.supervise.attempt import run_attempt
from jitguard.supervise.build_options import BuildOptions, BuildResult, BuildRun, JobPlan
from jitguard.supervise.diagnosis import build_finding, diagnose
from jitguard.supervise.oom import OomCounters
from jitguard.supervise.progress import make_reporter, steps_total

LOG = logging.getLogger("jitguard.supervise")

BUILD_LOCK_NAME = ".jitguard.lock"  # in the build directory: one build per directory, whoever starts it


# -- planning ----------------------------------------------------------------------------------------------


def _plan(options: BuildOptions, module: str, cache_dir: Path) -> JobPlan:
    job_memory = options.job_memory
    if job_memory is None:
        with contextlib.suppress(Exception):  # a learned estimate is a help, never a reason to fail
            job_memory = JobMemoryStore(cache_dir).estimate(module)
    plan = plan_jobs(
        memory.probe(), budget=options.memory_budget, job_memory=job_memory, requested_jobs=options.jobs
    )
    # 0: not even one job fits the budget. One job is still the best try; an OOM kill is then classified.
    return JobPlan(max(1, plan.jobs), plan.budget_bytes, plan.job_memory, plan.reason)


# -- the public entry point --------------------------------------------------------------------------------


def default_log_path(cache_dir: Path, module: str) -> Path:
    """A new log in ``<cache_dir>/logs``, or in the private temporary fallback when the cache dir is
    refused or cannot take a file (``fileio.state_dir``; doctor says which)."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    try:
        directory = fileio.state_dir(cache_dir, "logs")
    except OSError:
        directory = Path(cache_dir) / "logs"  # opening the log then fails, and says why
    return directory / f"{fileio.safe_name(module) or 'build'}-{stamp}-{os.getpid()}.log"


def run_ninja(
    build_dir: Path,
    ninja_file: Path,
    *,
    module: str,
    options: BuildOptions,
    log_path: Path | None = None,
) -> BuildResult:
    """Build ``ninja_file`` in ``build_dir`` under supervision. Raises ``BuildFailed`` on failure.

    1. nothing to do (the original manifest is up to date): return at once; a manifest ninja cannot load is a
       ``UsageError`` naming the user's file and line;
    2. take the build lock of the build directory (``locks.visible_lock``: others wait visibly, time out, or take
       over when the holder dies), and look again: a build that finished while we waited leaves nothing to do;
    3. plan the jobs from the memory budget (``facts.capacity.plan_jobs``) unless they are given;
    4. run ninja on a copy of the manifest whose commands hold a host-wide compile slot (``supervise.manifest``,
       ``supervise.launcher``, ``supervise.slots``), under a keeper in its own session and cgroup
       (``supervise.process_tree``), the full output in the log, live progress (``supervise.progress``);
    5. watch it (``supervise.attempt``): overall timeout, stall watchdog, memory;
    6. on an OOM kill (``supervise.oom``), run again with half the jobs (ninja keeps what finished) down to one;
    7. on success record the per-job peak memory and the wall time (``supervise.build_time``); on failure raise
       ``BuildFailed`` with the classified findings (``supervise.diagnosis``) and the log path.
    """
    build_dir = Path(build_dir)
    ninja_file = Path(ninja_file)
    if not ninja_file.is_file():
        raise UsageError(
            f"{ninja_file} is not a ninja build file (it does not exist). Give the path of a build.ninja."
        )
    if options.timeout <= 0 or options.stall_timeout <= 0:
        raise UsageError("the build timeout and stall timeout must be positive durations, e.g. 600 or 10m")
    if options.jobs is not None and not 1 <= options.jobs <= MAX_JOBS:
        raise UsageError(
            f"--jobs {options.jobs}: the number of jobs must be from 1 to {MAX_JOBS} (or 'auto')"
        )
    cache_dir = Path(options.cache_dir) if options.cache_dir else default_cache_dir()
    log_path = Path(log_path) if log_path else default_log_path(cache_dir, module)
    try:
        log = fileio.open_log(log_path)  # never through a link, 0600, redacted
    except OSError as exc:
        raise UsageError(
            f"cannot write the build log {log_path}: {exc.strerror or exc}. Set JITGUARD_CACHE_DIR to a writable "
            "directory (or give the log another place, e.g. --log /tmp/build.log)."
        ) from None
    ninja = options.ninja or shutil.which("ninja")
    if not ninja:
        finding = build_finding(
            "ninja-missing",
            options.backend,
            ["ninja was not found on PATH"],
            log_path=log_path,
            module=module,
        )
        with log:
            _note(log, "ninja was not found on PATH")
        raise BuildFailed(module, [finding], str(log_path), "ninja is not installed", outcome="not started")

    started = time.monotonic()
    with log:
        _note(log, f"building {module}: {ninja_file} in {build_dir}")
        if manifest.up_to_date(ninja, build_dir, ninja_file):
            _note(log, "ninja: no work to do")
            return _nothing_to_do(module, log_path, started)
        lock = ModuleLock(
            build_dir / BUILD_LOCK_NAME, module, timeout=options.lock_timeout, log_path=log_path
        )
        with lock:
            if lock.waited > 0 and manifest.up_to_date(ninja, build_dir, ninja_file):
                _note(
                    log, f"built by another process while this one waited {lock.waited:.1f} s: nothing to do"
                )
                return _nothing_to_do(module, log_path, started)
            if lock.took_over_from is not None:
                _note(
                    log, f"taking over from {lock.took_over_from.describe()}, which exited without finishing"
                )
            plan = _plan(options, module, cache_dir)
            _note(log, f"plan: {plan.reason}")
            foreseen = build_time.foresee(cache_dir, module, plan.jobs)
            if foreseen.estimate_s is not None:
                _note(log, f"expected to take about {foreseen.estimate_s:.0f} s (the last build here)")
            if foreseen.warning:
                _note(log, f"warning: {foreseen.warning}")
                LOG.warning("jitguard: %s", foreseen.warning)
            slots_dir = Path(options.slots_dir) if options.slots_dir else slots.host_slots_dir(cache_dir)
            reporter = make_reporter(options.progress, interval=options.progress_interval)
            cache = _compiler_cache(options, log)
            try:
                return _build(
                    BuildRun(
                        module=module,
                        build_dir=build_dir,
                        ninja_file=ninja_file,
                        ninja=ninja,
                        plan=plan,
                        options=options,
                        slots_dir=slots_dir,
                        log=log,
                        log_path=log_path,
                        cache_dir=cache_dir,
                        reporter=reporter,
                        started=time.monotonic(),
                        keep_fds=(lock.fileno(),),
                        compiler_cache=cache,
                        foreseen=foreseen,
                    )
                )
            finally:
                reporter.close()
                if cache is not None:
                    _report_compiler_cache(cache, log)
                    cache.close()


def _build(b: BuildRun) -> BuildResult:
    wrapped = b.log_path.with_name(b.log_path.name + ".ninja")
    try:
        manifest.write_wrapped(b.ninja_file, wrapped, manifest.launcher_prefix())
    except OSError as exc:  # the log's directory filled up or changed since the log was opened
        raise UsageError(
            f"cannot write the wrapped build manifest {wrapped}: {exc.strerror or exc}. Free space there, or give "
            "the log another place (e.g. --log /tmp/build.log)."
        ) from None
    # ninja's log hashes command lines: keep plain-ninja objects and ours valid for both manifests.
    record = ninja_log.log_path(b.build_dir, b.ninja_file)
    original = ninja_log.compdb(b.ninja, b.build_dir, b.ninja_file)
    ours = ninja_log.compdb(b.ninja, b.build_dir, wrapped)
    ninja_log.translate(record, original, ours)
    try:
        return _attempts(b, wrapped)
    finally:
        if ninja_log.translate(record, ours, original):
            _note(b.log, f"recorded the finished objects for plain ninja too ({record})")


def _attempts(b: BuildRun, wrapped: Path) -> BuildResult:
    deadline = b.started + b.options.timeout
    jobs = b.plan.jobs
    peak_rss = 0
    peak_job = 0
    counters = OomCounters()
    counters.watch("self")
    attempt_no = 0
    steps = 0
    b.reporter.message(
        f"jitguard: building {b.module} with {jobs} job{'s' if jobs != 1 else ''} ({b.plan.reason})"
    )
    while True:
        attempt_no += 1
        counters.reset()
        attempt = run_attempt(
            b, wrapped=wrapped, jobs=jobs, attempt_no=attempt_no, deadline=deadline, counters=counters
        )
        if b.compiler_cache is not None:
            b.compiler_cache.finish_attempt(attempt_no)
        peak_rss = max(peak_rss, attempt.peak_rss)
        peak_job = max(peak_job, attempt.peak_job_rss)
        steps = max(steps, steps_total(attempt.text))  # a retry's total leaves out what the first finished
        if attempt.ended == "done" and attempt.returncode == 0:
            wall = time.monotonic() - b.started
            if attempt_no == 1 and any("ninja: no work to do" in line for line in attempt.text):
                return BuildResult(
                    module=b.module,
                    log_path=b.log_path,
                    jobs=jobs,
                    attempts=0,
                    wall_s=wall,
                    peak_rss_bytes=0,
                    budget_bytes=b.plan.budget_bytes,
                    job_memory=b.plan.job_memory,
                )
            _note(b.log, f"finished in {wall:.1f} s with {jobs} jobs; peak memory {format_bytes(peak_rss)}")
            b.reporter.message(
                f"jitguard: built {b.module} in {wall:.0f} s (attempt {attempt_no}, "
                f"{jobs} jobs, peak memory {format_bytes(peak_rss)})"
            )
            _learn(b.cache_dir, b.module, peak_job)
            build_time.remember(b.cache_dir, b.module, wall_s=wall, steps=steps, jobs=jobs)
            return BuildResult(
                module=b.module,
                log_path=b.log_path,
                jobs=jobs,
                attempts=attempt_no,
                wall_s=wall,
                peak_rss_bytes=peak_rss,
                budget_bytes=b.plan.budget_bytes,
                job_memory=b.plan.job_memory,
                peak_job_rss_bytes=peak_job,
                plan_reason=b.plan.reason,
                compiler_cache=b.compiler_cache.total() if b.compiler_cache is not None else None,
            )
        if attempt.ended == "done" and attempt.oom_evidence and jobs > 1:
            jobs = max(1, jobs // 2)
            message = (
                f"a compile job of {b.module} was killed for lack of memory "
                f"({attempt.oom_evidence[0]}); retrying with {jobs} job{'s' if jobs != 1 else ''} "
                "(finished objects are kept)"
            )
            _note(b.log, message)
            b.reporter.message(f"jitguard: {message}")
            continue
        _note(b.log, f"failed: {attempt.ended}, ninja exit status {attempt.returncode}")
        findings, detail = diagnose(attempt, module=b.module, options=b.options, log_path=b.log_path)
        raise BuildFailed(b.module, findings, str(b.log_path), detail)


def _nothing_to_do(module: str, log_path: Path, started: float) -> BuildResult:
    """The result of a build ninja found up to date: no jobs, no attempt."""
    return BuildResult(
        module=module,
        log_path=log_path,
        jobs=0,
        attempts=0,
        wall_s=time.monotonic() - started,
        peak_rss_bytes=0,
    )


def _compiler_cache(options: BuildOptions, log: fileio.LogFile) -> compiler_cache.Session | None:
    """The build's sccache session, when it uses one. A cache that was asked for and cannot be used is one
    warning and a plain build."""
    env = dict(os.environ)
    if options.compiler_cache:
        env[compiler_cache.MODE_ENV] = options.compiler_cache
    choice = compiler_cache.choose(env)
    if choice.warning:
        _note(log, f"compiler cache: {choice.warning}")
        LOG.warning("jitguard: %s", choice.warning)
    if choice.binary is None:
        return None
    _note(log, f"compiler cache: sccache {choice.binary}, {choice.backend} ({choice.reason})")
    return compiler_cache.Session.open(choice)


def _report_compiler_cache(cache: compiler_cache.Session, log: fileio.LogFile) -> None:
    total = cache.total()
    _note(log, f"compiler cache: {total.describe()}")
    if total.degraded:
        LOG.warning(
            "jitguard: the compiler cache was not used for (part of) this build: %s; compiled without it",
            total.degraded,
        )


def _learn(cache_dir: Path, module: str, peak_job: int) -> None:
    with contextlib.suppress(Exception):  # learning is best effort; a read-only cache must not fail a build
        JobMemoryStore(cache_dir).observe(module, peak_job)
