"""Finding codes of the 'build' area: what ended a supervised build. See docs/findings.md (generated).

Every entry names the full log with ``{log_path}``. ``build-oom-killed``, ``disk-full`` and ``build-failed``
are also made by ``findings.classify`` from any log, so they use only ``{log_path}`` (and ``{returncode}``);
the entries only the runner makes also use ``{module}`` and the parameters named in their comment.
``lock-timeout`` is raised by the build lock: ``{module}``, ``{lock_path}``, ``{holder}`` (pid/host/age as
text) and ``{waited}`` (e.g. ``3600 s``).
"""

from __future__ import annotations

from jitguard.findings.model import CatalogEntry, FixTemplate

_AREA = "build"

ENTRIES: tuple[CatalogEntry, ...] = (
    CatalogEntry(
        code="build-oom-killed",
        severity="error",
        title="A compile job was killed for lack of memory",
        cause=(
            "A compiler process was killed while building (SIGKILL / exit 137, a cgroup OOM kill, or "
            "an allocation failure in cicc/ptxas/cc1plus): the concurrent compile jobs needed more memory "
            "than "
            "this machine or container allows. The build was retried with fewer parallel jobs down to one. "
            "Full log: {log_path}"
        ),
        fixes=(
            FixTemplate(
                "Give the build a memory budget it can keep to (jitguard sizes the parallelism from it).",
                "JITGUARD_MEMORY_BUDGET=75%",
            ),
            FixTemplate(
                "Raise the per-job memory estimate so fewer jobs run at once.", "JITGUARD_JOB_MEMORY=8G"
            ),
            FixTemplate("Or build with fewer jobs yourself.", "jitguard build ninja <build.ninja> --jobs 1"),
            FixTemplate(
                "Raise the memory limit of the container or cgroup (a GDN SM90 compile job needs ~6 GiB)."
            ),
        ),
        area=_AREA,
    ),
    # {timeout}: the overall limit, e.g. "3600 s".
    CatalogEntry(
        code="build-timeout",
        severity="error",
        title="The build did not finish within its time limit",
        cause=(
            "Building {module} took longer than {timeout}; jitguard stopped it and removed every process of "
            "the "
            "build. Objects that finished are kept, so a rerun resumes. Full log: {log_path}"
        ),
        fixes=(
            FixTemplate(
                "Allow more time (a cold FlashInfer GDN build takes ~6 min on 16 cores, ~1 h on 2).",
                "JITGUARD_BUILD_TIMEOUT=2h",
            ),
            FixTemplate(
                "Prebuild the module ahead of serving, e.g. in the image build step.",
                "jitguard build flashinfer-gdn",
            ),
        ),
        area=_AREA,
    ),
    # {stall_timeout}: e.g. "600 s"; {progress}: e.g. "12/34".
    CatalogEntry(
        code="build-stalled",
        severity="error",
        title="The build stopped making progress",
        cause=(
            "Building {module} printed nothing and used no CPU for {stall_timeout} (at step {progress}); a "
            "compiler hung or waits on something that never comes. jitguard stopped it and removed every "
            "process "
            "of the build. Full log: {log_path}"
        ),
        fixes=(
            FixTemplate("Look at the last lines of the log for the step that hung.", "tail -n 50 {log_path}"),
            FixTemplate(
                "If a step legitimately runs silent for long, raise the stall timeout.",
                "JITGUARD_STALL_TIMEOUT=30m",
            ),
        ),
        area=_AREA,
    ),
    CatalogEntry(
        code="disk-full",
        severity="error",
        title="The disk filled up during the build",
        cause=(
            "A build step could not write its output: no space left on the device (or the disk "
            "quota is exhausted). Full log: {log_path}"
        ),
        fixes=(
            FixTemplate("Free space on the file system of the build directory, then rebuild.", "df -h"),
            FixTemplate(
                "Or point the JIT workspace at a larger disk.", "FLASHINFER_WORKSPACE_BASE=/path/with/space"
            ),
        ),
        area=_AREA,
    ),
    # {returncode}: ninja's exit status.
    CatalogEntry(
        code="build-failed",
        severity="error",
        title="The build failed",
        cause=(
            "The build failed (exit status {returncode}) for a reason jitguard does not recognise; the "
            "evidence shows the error lines. Full log: {log_path}"
        ),
        fixes=(
            FixTemplate("Read the full log for the first error.", "less {log_path}"),
            FixTemplate("Check the toolchain and environment for known problems.", "jitguard doctor"),
        ),
        area=_AREA,
    ),
    CatalogEntry(
        code="lock-timeout",
        severity="error",
        title="Gave up waiting for another process to finish building",
        cause=(
            "Another process ({holder}) holds the build lock of {module} ({lock_path}) and did not finish "
            "within "
            "{waited}. jitguard stopped waiting instead of hanging forever."
        ),
        fixes=(
            FixTemplate("Wait longer for the other build.", "JITGUARD_LOCK_TIMEOUT=2h"),
            FixTemplate("If the holder is stuck, stop it (its pid is above); the next process takes over."),
            FixTemplate(
                "Prebuild the module once before starting many ranks.", "jitguard build flashinfer-gdn"
            ),
        ),
        area=_AREA,
    ),
    # {signal}: e.g. "SIGTERM".
    CatalogEntry(
        code="build-interrupted",
        severity="error",
        title="The build was interrupted",
        cause=(
            "Building {module} was interrupted ({signal}); jitguard removed every process of the build. "
            "Objects "
            "that finished are kept, so a rerun resumes. Full log: {log_path}"
        ),
        fixes=(FixTemplate("Run the build again; it resumes where it stopped."),),
        area=_AREA,
    ),
    # {arch}: e.g. "9.0a".
    CatalogEntry(
        code="compile-probe-passed",
        severity="info",
        title="A real supervised build of a probe module passed ({arch})",
        cause=(
            "`jitguard doctor --compile` compiled a small CUDA module with nvcc for {arch} and linked it with "
            "FlashInfer's own link line (-lcudart -lcuda, FLASHINFER_EXTRA_LDFLAGS) through jitguard's runner, "
            "and its GLIBCXX needs are met by the runtime libstdc++. FlashInfer's JIT builds can link here."
        ),
        area=_AREA,
    ),
    # {error}: the loader's first line; {so_path}: the probe library. Made when no more specific cause (such
    # as so-glibcxx-missing) explains the loader's error.
    CatalogEntry(
        code="compile-probe-load-failed",
        severity="error",
        title="The probe module built and linked, but does not load here",
        cause=(
            "`jitguard doctor --compile` built and linked a small CUDA module the way FlashInfer's JIT does, "
            "then loading it ({so_path}) in a fresh process failed: {error}. A FlashInfer module built here "
            "would fail the same way when the engine loads it."
        ),
        fixes=(
            FixTemplate(
                "See where the loader finds the CUDA libraries the module needs (libcuda.so.1 comes with the "
                "NVIDIA driver, libcudart with the CUDA toolkit or a CUDA build of torch); a library it does "
                "not list must be installed or its directory put on LD_LIBRARY_PATH",
                "ldconfig -p | grep -E 'libcuda\\.so|libcudart\\.so'",
            ),
        ),
        area=_AREA,
    ),
)
