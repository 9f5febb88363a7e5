"""Finding codes of the 'gdn' area: why a GDN prefill backend was skipped or failed. See docs/findings.md."""

from __future__ import annotations

from jitguard.findings.model import CatalogEntry, FixTemplate

_AREA = "gdn"

ENTRIES: tuple[CatalogEntry, ...] = (
    CatalogEntry(
        code="gdn-input-unsupported",
        severity="error",
        title="{title} cannot take these inputs",
        cause="{reason}",
        fixes=(
            FixTemplate(
                "Let jitguard pick a backend that takes them: call with backend='auto' (the default)."
            ),
            FixTemplate("Or name a backend that takes them, e.g. backend='{alternative}'."),
        ),
        area=_AREA,
    ),
    CatalogEntry(
        code="gdn-cached-failure",
        severity="error",
        title="{title} failed here before; not retried",
        cause=(
            "jitguard recorded a failure of {module} in this same environment (fingerprint {fingerprint}): "
            "{previous}. It is not tried again until something in the environment changes."
        ),
        fixes=(
            FixTemplate(
                "Fix the cause recorded with the failure; the entry is listed by:", "jitguard cache list"
            ),
            FixTemplate(
                "Forget the failure to make jitguard try again now:",
                "jitguard cache clear --module {module} --yes",
            ),
        ),
        area=_AREA,
    ),
    CatalogEntry(
        code="gdn-first-use-failed",
        severity="error",
        title="{title} failed to {stage} on first use",
        cause="{error}",
        fixes=(
            FixTemplate("Diagnose this machine for the backend:", "jitguard doctor"),
            FixTemplate("Or use backend='{alternative}' until it is fixed."),
        ),
        area=_AREA,
    ),
    CatalogEntry(
        code="gdn-launch-failed",
        severity="error",
        title="{title} kernel failed on its first launch",
        cause="{error}",
        fixes=(
            FixTemplate(
                "Check that the GPU, CUDA driver and the backend's version support this call:",
                "jitguard doctor",
            ),
            FixTemplate("Or use backend='{alternative}' until it is fixed."),
        ),
        area=_AREA,
    ),
    CatalogEntry(
        code="gdn-preflight-crashed",
        severity="warning",
        title="jitguard's pre-flight checks for {title} crashed",
        cause=(
            "The checks raised {error}. The backend was not ruled out; if it fails on first use, "
            "jitguard still falls through to the next backend."
        ),
        fixes=(FixTemplate("Report this as a jitguard bug with the output of:", "jitguard doctor --json"),),
        area=_AREA,
    ),
    CatalogEntry(
        code="gdn-fallback-in-use",
        severity="warning",
        title="GDN prefill on {device} runs on {title}",
        cause="Faster backends were skipped: {skipped}. See the decision trace: `jitguard gdn explain`.",
        fixes=(FixTemplate("Fix the first skipped backend's finding, shown with:", "jitguard gdn explain"),),
        area=_AREA,
    ),
)
