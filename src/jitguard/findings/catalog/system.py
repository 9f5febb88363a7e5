"""Finding codes of the 'system' area: GPU, memory, disk, cache directories, environment variables.
See docs/findings.md (generated)."""

from __future__ import annotations

from jitguard.findings.model import CatalogEntry, FixTemplate

_AREA = "system"

ENTRIES: tuple[CatalogEntry, ...] = (
    CatalogEntry(
        code="gpu-none",
        severity="error",
        title="No NVIDIA GPU is visible to this process",
        cause=(
            "The {backend_label} runs its kernels on an NVIDIA GPU, and none is visible here: {reason}. "
            "Building does not need a GPU (jitguard build works on a CPU host), running does."
        ),
        fixes=(
            FixTemplate("Check that the driver sees the GPUs:", "nvidia-smi"),
            FixTemplate(
                "If CUDA_VISIBLE_DEVICES hides them (empty, -1, or a wrong index or UUID), correct or unset "
                "it:",
                "unset CUDA_VISIBLE_DEVICES",
            ),
            FixTemplate(
                "In a container, start it with the GPUs and the driver libraries mounted:",
                "docker run --gpus all ...",
            ),
            FixTemplate(
                "To prebuild FlashInfer's GDN module on this GPU-less host for a GPU host later:",
                "jitguard build flashinfer-gdn --arch 9.0a",
            ),
            FixTemplate(
                "Use the PyTorch backend, which runs anywhere (slowly):", "export JITGUARD_GDN_BACKEND=torch"
            ),
        ),
        area=_AREA,
    ),
    CatalogEntry(
        code="gpu-arch-unsupported",
        severity="error",
        title="{component} does not run on this GPU (compute capability {capability})",
        cause=("{gpu_name} has compute capability {capability}; {component} supports {supported}. {detail}"),
        fixes=(
            FixTemplate("Use a backend that supports this GPU:", "export JITGUARD_GDN_BACKEND={alternative}"),
            FixTemplate(
                "In vLLM, choose the Triton (FLA) GDN prefill kernels:",
                "vllm serve <model> --gdn-prefill-backend triton",
            ),
            FixTemplate(
                "Install a {package} version that supports this GPU, if there is one:", "{upgrade_command}"
            ),
        ),
        area=_AREA,
    ),
    CatalogEntry(
        code="memory-too-small",
        severity="error",
        title="Not enough memory for even one compile job of {module}",
        cause=(
            "Compiling {module} with nvcc takes about {job_memory} per concurrent job (cicc), and only "
            "{budget} is available to this process ({limited_by}), less {headroom} headroom. The build would "
            "be OOM-killed, after minutes of work."
        ),
        fixes=(
            FixTemplate(
                "Install the prebuilt module, so nothing is compiled:",
                "pip install flashinfer-jit-cache=={version} --index-url https://flashinfer.ai/whl/{cuda_tag}",
            ),
            FixTemplate(
                "Build it once on a machine with more memory (a Docker build step, CI) and ship the cache "
                "dir {workspace}:",
                "jitguard build flashinfer-gdn --arch {arch}",
            ),
            FixTemplate("Raise the memory limit of this container or cgroup (now {limit}).", None),
            FixTemplate(
                "Use the Triton (FLA) backend, which compiles far smaller kernels:",
                "export JITGUARD_GDN_BACKEND=triton",
            ),
        ),
        area=_AREA,
    ),
    CatalogEntry(
        code="memory-limits-parallelism",
        severity="info",
        title="Memory limits the {module} build to {jobs} parallel jobs (stock: {default_jobs})",
        cause=(
            "Stock FlashInfer runs ninja with {default_jobs} jobs ({default_source}); at about {job_memory} "
            "per job that needs ~{default_need}, but {budget} is available ({limited_by}). jitguard's plan: "
            "{reason}."
        ),
        fixes=(
            FixTemplate(
                "Let jitguard build it with the memory-bounded plan (also ahead of time, e.g. in a Docker "
                "build):",
                "jitguard build flashinfer-gdn --memory-budget {budget_arg}",
            ),
            FixTemplate(
                "Or cap stock FlashInfer's ninja yourself before starting the engine:",
                "export MAX_JOBS={jobs}",
            ),
            FixTemplate(
                "Or skip the compile entirely with the prebuilt module:",
                "pip install flashinfer-jit-cache=={version} --index-url https://flashinfer.ai/whl/{cuda_tag}",
            ),
        ),
        area=_AREA,
    ),
    CatalogEntry(
        code="disk-low",
        severity="warning",
        title="Little free disk space at {path}: {free}",
        cause=(
            "{purpose} lives in {path} (file system of {existing}) with {free} free; {need} is recommended. "
            "A build that runs out of space fails late with 'No space left on device'."
        ),
        fixes=(
            FixTemplate(
                "Free space on that file system, or see what uses it:", "du -sh {existing}/* | sort -h"
            ),
            FixTemplate("{relocate_text}", "{relocate_command}"),
        ),
        area=_AREA,
    ),
    CatalogEntry(
        code="cache-dir-unwritable",
        severity="error",
        title="Cannot write to {path}",
        cause="{purpose} must be writable by this user (uid {uid}): {error}. {consequence}",
        fixes=(
            FixTemplate("{repair_text}", "{repair_command}"),
            FixTemplate("{relocate_text}", "{relocate_command}"),
        ),
        area=_AREA,
    ),
    CatalogEntry(
        code="cache-dir-shared-writable",
        severity="warning",
        title="{path} can be written by other users",
        cause=(
            "{purpose} is {reasons}. {loader} loads compiled modules from there without checking who wrote "
            "them, so another user could plant code that runs in your process."
        ),
        fixes=(
            FixTemplate("Make it private to you:", "chmod go-w {existing}"),
            FixTemplate("{relocate_text}", "{relocate_command}"),
        ),
        area=_AREA,
    ),
    CatalogEntry(
        code="cache-dir-untrusted",
        severity="warning",
        title="jitguard does not trust its cache dir {path}",
        cause=(
            "{path} is {reasons}. Like ssh with ~/.ssh, jitguard neither reads nor writes state in a directory "
            "that another user owns or can write: a planted record could otherwise decide a verdict or a build. "
            "Until it is fixed, build outcomes and learned memory are not remembered, and build logs and compile "
            "slots go to {fallback}."
        ),
        fixes=(
            FixTemplate("Make it private to its owner:", "chmod 700 {path}"),
            FixTemplate(
                "If another user owns it, give it to yourself:", "sudo chown -R $(id -u):$(id -g) {path}"
            ),
            FixTemplate("{relocate_text}", "{relocate_command}"),
        ),
        area=_AREA,
    ),
    CatalogEntry(
        code="cache-on-network-fs",
        severity="warning",
        title="{what} is on a network file system ({fs_type})",
        cause=(
            "{what} ({path}) is on {fs_type}, mounted at {mount_point} from {source}. File locks there are "
            "emulated or refused (NFS emulates flock with byte-range locks and loses them when the server "
            "restarts; Lustre refuses flock without `-o flock`), and caches that several hosts write at once "
            "race. {consequence}"
        ),
        fixes=(
            FixTemplate("Point {variable} at a directory on local disk:", "export {variable}={local}"),
            FixTemplate("See the file system and mount options of that directory:", "findmnt {mount_point}"),
        ),
        area=_AREA,
    ),
    CatalogEntry(
        code="env-max-jobs-invalid",
        severity="warning",
        title="MAX_JOBS={max_jobs!r} does not limit FlashInfer's build",
        cause=(
            "FlashInfer passes MAX_JOBS to ninja only when it is a plain number of digits; {detail} "
            "The build then runs {default_jobs} at once, which is what MAX_JOBS was meant to prevent."
        ),
        fixes=(
            FixTemplate("Set a plain positive integer:", "export MAX_JOBS={suggested}"),
            FixTemplate("Or let jitguard plan the jobs from memory:", "unset MAX_JOBS"),
        ),
        area=_AREA,
    ),
    CatalogEntry(
        code="env-jit-verbose-debug",
        severity="warning",
        title="FLASHINFER_JIT_VERBOSE=1 also builds debug kernels",
        cause=(
            "Without FLASHINFER_JIT_DEBUG, FlashInfer takes its debug switch from FLASHINFER_JIT_VERBOSE, so "
            "verbose builds compile device code with -G -O0: far slower kernels and much longer compiles, "
            "cached under the same name as normal builds."
        ),
        fixes=(
            FixTemplate("Keep the verbose log but build optimised kernels:", "export FLASHINFER_JIT_DEBUG=0"),
            FixTemplate("Or drop the verbose switch:", "unset FLASHINFER_JIT_VERBOSE"),
        ),
        area=_AREA,
    ),
    CatalogEntry(
        code="env-arch-list-invalid",
        severity="error",
        title="FLASHINFER_CUDA_ARCH_LIST={value!r} makes `import flashinfer` fail",
        cause=(
            "FlashInfer splits FLASHINFER_CUDA_ARCH_LIST on single spaces and parses each item as "
            "'major.minor' when it is imported; {detail}"
        ),
        fixes=(
            FixTemplate(
                "Use space-separated 'major.minor' items, e.g. for H100/H200:",
                "export FLASHINFER_CUDA_ARCH_LIST=9.0a",
            ),
            FixTemplate(
                "Or unset it on a GPU host (FlashInfer then asks the GPUs):",
                "unset FLASHINFER_CUDA_ARCH_LIST",
            ),
        ),
        area=_AREA,
    ),
)
