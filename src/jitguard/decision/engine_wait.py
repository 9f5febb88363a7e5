"""Will a JIT build outlast the engine's wait for it? The build's time foreseen against the engine's timeout.

vLLM's API server waits ``VLLM_ENGINE_READY_TIMEOUT_S`` seconds (600 by default) for its engine core, which
JIT-compiles FlashInfer's modules on first use; a cold build longer than that makes the server give up while
the build still runs (vLLM issue #48031). SGLang has no such wait for its scheduler that jitguard knows of.
When the duration learned for a module on this host says the build will take longer than the wait, the build
says so at its start, with the two ways out: prebuild the module in the image, or raise the wait.

Pure: the module, the estimate, the environment and whether vLLM runs here in; a message or None out.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

VLLM_READY_TIMEOUT_ENV = "VLLM_ENGINE_READY_TIMEOUT_S"
VLLM_READY_TIMEOUT_DEFAULT_S = 600.0
GDN_MODULE_PREFIX = "gdn_prefill"  # FlashInfer's GDN prefill modules (full and partial)


def vllm_ready_timeout(env: Mapping[str, str], *, in_vllm: bool) -> float | None:
    """The seconds vLLM waits for its engine: the variable when set to a positive number, vLLM's default when
    vLLM runs here, else None (outside vLLM, and nobody said they will serve with it)."""
    raw = env.get(VLLM_READY_TIMEOUT_ENV, "").strip()
    try:
        value = float(raw) if raw else math.nan
    except ValueError:
        value = math.nan
    if math.isfinite(value) and value > 0:
        return value
    return VLLM_READY_TIMEOUT_DEFAULT_S if in_vllm else None


def ready_timeout_warning(
    module: str, estimate_s: float | None, env: Mapping[str, str], *, in_vllm: bool
) -> str | None:
    """The warning to give when building ``module`` is expected to take longer than vLLM waits for its
    engine, else None (no estimate, no known wait, or the build fits)."""
    timeout = vllm_ready_timeout(env, in_vllm=in_vllm)
    if estimate_s is None or timeout is None or estimate_s <= timeout:
        return None
    raise_to = max(math.ceil(estimate_s * 1.5), math.ceil(timeout) + 1)
    if module.startswith(GDN_MODULE_PREFIX):
        prebuild = (
            "jitguard build flashinfer-gdn --model PATH/config.json (in the image, e.g. a Docker RUN step)"
        )
    else:
        prebuild = "build it once in the image (run the engine, or jitguard build, at image build time)"
    return (
        f"building {module} is expected to take about {_minutes(estimate_s)} (learned on this host), longer than "
        f"vLLM waits for its engine to be ready ({VLLM_READY_TIMEOUT_ENV}={timeout:g} s): the API server may give "
        f"up while the build still runs. Prebuild it: {prebuild}; or raise the wait: "
        f"export {VLLM_READY_TIMEOUT_ENV}={raise_to}"
    )


def _minutes(seconds: float) -> str:
    return "1 min" if seconds < 90 else f"{round(seconds / 60)} min"
