"""How many compile jobs fit: the memory budget (docs/design.md "Memory budget"). Pure: facts in, a plan out.

    jobs = min(CPU limit, floor((budget - headroom) / memory per job))

- budget: ``--memory-budget`` / JITGUARD_MEMORY_BUDGET ("32G", or "75%" of available), else all available
  memory (min of MemAvailable and every cgroup's limit - working set; see jitguard.facts.memory).
- memory per job: learned per module when known, else DEFAULT_JOB_MEMORY, measured: FlashInfer 0.6.6's
  GDN SM90 build peaked at 103 GiB with 18 concurrent cicc on the H200 host, ~5.7 GiB per job.
- headroom: max(1 GiB, 5% of the budget). Per-job peaks vary around the average (one GDN instance TU alone
  peaked at 6.2 GiB on the CPU build host, 9% over 5.7), ninja, the linker and the calling process need some
  room, and MemAvailable moves while the build runs; 5% covers the spread on large hosts, where it matters
  most in absolute terms, and 1 GiB keeps a small host from planning to the last byte.
"""

from __future__ import annotations

from dataclasses import dataclass

from jitguard.config import MemorySpec, format_bytes
from jitguard.errors import UsageError
from jitguard.facts.memory import MemoryFacts

GIB = 1024**3
DEFAULT_JOB_MEMORY = int(5.7 * GIB)
MIN_HEADROOM = 1 * GIB
HEADROOM_FRACTION = 0.05


@dataclass(frozen=True)
class JobPlan:
    jobs: int  # 0: not even one job fits the budget (see reason)
    budget_bytes: int | None  # None: memory unknown
    job_memory: int
    headroom: int
    cpu_limit: int
    reason: str
    memory_jobs: int | None = None  # what memory alone allows (None: unknown)
    source: str = "memory"  # what decided `jobs`: "requested", "memory", "cpu" or "unknown-memory"

    @property
    def fits(self) -> bool:
        return self.jobs >= 1


def headroom_for(budget: int) -> int:
    return max(MIN_HEADROOM, int(budget * HEADROOM_FRACTION))


def ninja_default_jobs(cpus: int) -> int:
    """ninja's -j when none is given (its GuessParallelism): 2 for 0-1 CPUs, 3 for 2, else CPUs + 2."""
    if cpus <= 1:
        return 2
    if cpus == 2:
        return 3
    return cpus + 2


def plan_jobs(
    memory: MemoryFacts,
    *,
    budget: MemorySpec | None,
    job_memory: int | None,
    requested_jobs: int | None,
) -> JobPlan:
    """The number of parallel compile jobs for this machine, and why.

    ``requested_jobs`` (``--jobs N``, a valid MAX_JOBS) wins: the user asked; ``memory_jobs`` and the reason
    say when it exceeds what the memory plan would allow, and the runner's OOM retry still halves it if
    needed.
    """
    if requested_jobs is not None and requested_jobs < 1:
        raise UsageError(
            f"jobs must be at least 1 (got {requested_jobs}); use --jobs auto to plan from memory"
        )
    if job_memory is not None and job_memory <= 0:
        raise UsageError(f"memory per job must be positive (got {job_memory} bytes), e.g. --job-memory 6G")
    per_job = job_memory or DEFAULT_JOB_MEMORY
    cpus = memory.cpu_limit
    available = memory.available

    if budget is not None and budget.bytes is not None and available is not None and budget.bytes > available:
        # A budget larger than what is free would let the kernel's OOM killer decide instead of us.
        budget_bytes: int | None = available
        budget_text = f"budget {format_bytes(budget.bytes)} capped at {format_bytes(available)} available"
    elif budget is not None and budget.bytes is not None:
        budget_bytes = budget.bytes
        budget_text = f"budget {format_bytes(budget.bytes)}"
    elif available is None:
        budget_bytes = None
        budget_text = "memory unknown"
    elif budget is not None:
        budget_bytes = budget.resolve(available)
        budget_text = f"budget {budget} of {format_bytes(available)} available = {format_bytes(budget_bytes)}"
    else:
        budget_bytes = available
        budget_text = f"budget = {format_bytes(available)} available ({memory.limited_by})"
    if budget_bytes is not None and budget_bytes <= 0:
        raise UsageError(f"memory budget must be positive (got {budget}), e.g. --memory-budget 32G or 75%")

    headroom = headroom_for(budget_bytes) if budget_bytes is not None else 0
    memory_jobs = max(0, (budget_bytes - headroom) // per_job) if budget_bytes is not None else None
    per_job_text = f"{format_bytes(per_job)} per job"

    def plan(jobs: int, source: str, reason: str) -> JobPlan:
        return JobPlan(jobs, budget_bytes, per_job, headroom, cpus, reason, memory_jobs, source)

    if requested_jobs is not None:
        reason = f"{_jobs(requested_jobs)} as requested"
        if memory_jobs is not None and requested_jobs > memory_jobs:
            reason += (
                f"; memory allows only {memory_jobs} ({budget_text}, {format_bytes(headroom)} headroom, "
                f"{per_job_text})"
            )
        return plan(requested_jobs, "requested", reason)
    if memory_jobs is None:
        return plan(cpus, "unknown-memory", f"{_jobs(cpus)} (CPU limit); available memory is unknown")
    if memory_jobs == 0:
        assert budget_bytes is not None
        return plan(
            0,
            "memory",
            f"not even one job fits: {budget_text} less {format_bytes(headroom)} headroom leaves "
            f"{format_bytes(max(0, budget_bytes - headroom))}, and one job needs {format_bytes(per_job)}",
        )
    if memory_jobs < cpus:
        return plan(
            memory_jobs,
            "memory",
            f"{_jobs(memory_jobs)}: {budget_text}, {format_bytes(headroom)} headroom, {per_job_text} "
            f"(CPU limit {cpus})",
        )
    return plan(cpus, "cpu", f"{_jobs(cpus)} (CPU limit); memory would allow {memory_jobs} ({budget_text})")


def _jobs(n: int) -> str:
    return f"{n} job" if n == 1 else f"{n} jobs"
