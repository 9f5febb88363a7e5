"""findings: the Finding model, the one catalog, pre-flight checks and the build-log classifier."""

from jitguard.findings.model import Finding, Fix, Severity, sort_findings

__all__ = ["Finding", "Fix", "Severity", "sort_findings"]
