"""Finding codes of the 'engine' area: a FlashInfer JIT path an engine (vLLM) chooses on its own, such as
its sampler, attention or MoE kernels. See docs/findings.md and docs/vllm.md."""

from __future__ import annotations

from jitguard.findings.model import CatalogEntry, FixTemplate

_AREA = "engine"

ENTRIES: tuple[CatalogEntry, ...] = (
    CatalogEntry(
        code="flashinfer-cached-failure",
        severity="error",
        title="{title}: FlashInfer's {module} module failed here before; not retried",
        cause=(
            "jitguard recorded a failure of the FlashInfer JIT module {module} in this same environment "
            "(fingerprint {fingerprint}): {previous}. Building it again would fail the same way, so the engine "
            "takes its own path without it until something in the environment changes."
        ),
        fixes=(
            FixTemplate(
                "Fix the cause recorded with the failure; the entry is listed by:", "jitguard cache list"
            ),
            FixTemplate(
                "Forget the failure to make the engine try FlashInfer again at its next start:",
                "jitguard cache clear --module {module} --yes",
            ),
        ),
        area=_AREA,
    ),
    CatalogEntry(
        code="engine-warmup-failed",
        severity="error",
        title="{engine}'s own warmup of {title} failed: {error_type}",
        cause=(
            "{engine} ran {title} once on a tiny input before reporting ready ({where}), and it raised "
            "{error_type}: {error_message}. jitguard's pre-flight had not foreseen this cause; {then} The "
            "failure is recorded (fingerprint {fingerprint}), so the next start decides in the pre-flight."
        ),
        fixes=(
            FixTemplate(
                "Find the cause (imports FlashInfer's kernel module and names the error FlashInfer swallows):",
                "jitguard doctor --deep --backend flashinfer",
            ),
            FixTemplate(
                "Once fixed, forget the failure so the next start tries FlashInfer again:",
                "jitguard cache clear --module {module} --yes",
            ),
        ),
        area=_AREA,
    ),
    CatalogEntry(
        code="engine-proof-failed",
        severity="error",
        title="jitguard's proof call of {title} in {engine} failed: {error_type}",
        cause=(
            "{engine} makes no warmup call of {title} before it reports ready, so jitguard called it once itself "
            "({where}: the function the engine calls, on a tiny input of the model's shapes), and it raised "
            "{error_type}: {error_message}. jitguard's pre-flight had not foreseen this cause; {then} The "
            "failure is recorded (fingerprint {fingerprint}), so the next start decides in the pre-flight."
        ),
        fixes=(
            FixTemplate(
                "Find the cause (imports FlashInfer's kernel module and names the error FlashInfer swallows):",
                "jitguard doctor --deep --backend flashinfer",
            ),
            FixTemplate(
                "Once fixed, forget the failure so the next start tries FlashInfer again:",
                "jitguard cache clear --module {module} --yes",
            ),
        ),
        area=_AREA,
    ),
    CatalogEntry(
        code="flashinfer-module-prebuilt",
        severity="info",
        title="{title}: FlashInfer's {module} module is already built here",
        cause=(
            "FlashInfer loads {path} ({source}) instead of compiling it, so the JIT toolchain (nvcc, ninja, "
            "the host compiler, -lcuda) does not matter for it; only its load is checked."
        ),
        fixes=(),
        area=_AREA,
    ),
    CatalogEntry(
        code="flashinfer-cubin-no-modules",
        severity="info",
        title="flashinfer-cubin {cubin_version} holds kernel binaries, not the modules that run them",
        cause=(
            "flashinfer-cubin ships the kernels FlashInfer would otherwise download on first use ({kernels}). "
            "The modules that launch them ({launchers}) and every other FlashInfer module are still compiled "
            "with nvcc on first use, unless a flashinfer-jit-cache of the same version provides them. vLLM's "
            "has_flashinfer() takes flashinfer-cubin in place of nvcc; jitguard does not, so without a CUDA "
            "toolkit the engine takes its own path for these kernels."
        ),
        fixes=(
            FixTemplate(
                "Install the prebuilt modules of this FlashInfer (for torch's CUDA):", "{jit_cache_command}"
            ),
            FixTemplate("Or give the engine a CUDA toolkit (nvcc, ninja) and set CUDA_HOME to it."),
        ),
        area=_AREA,
    ),
    CatalogEntry(
        code="vllm-gate-wants-cubin",
        severity="info",
        title="vLLM turns FlashInfer's other kernels off here although flashinfer-jit-cache prebuilds them",
        cause=(
            "vLLM's has_flashinfer() answers True only with nvcc and ninja or with flashinfer-cubin installed; "
            "it does not look for flashinfer-jit-cache. Here {missing}, so vLLM answers False and uses its own "
            "kernels for everything behind it (FP8/FP4 GEMMs, all-reduce fusion, autotuning), although "
            "flashinfer-jit-cache {jit_cache_version} holds every module they load."
        ),
        fixes=(
            FixTemplate(
                "Install flashinfer-cubin of the same version too (`vllm download-kernels` installs both):",
                "pip install flashinfer-cubin=={version}",
            ),
            FixTemplate(
                "Or tell vLLM the kernels are there (it then also takes TRT-LLM-gen's cubins for available on "
                "Blackwell):",
                "export VLLM_HAS_FLASHINFER_CUBIN=1",
            ),
        ),
        area=_AREA,
    ),
)
