"""What a failed build attempt was: its findings and a one-line detail for ``BuildFailed``.

The runner's own observations come first (the overall timeout, the stall watchdog, an out-of-memory kill,
an interrupt, each with the log's last lines and the commands still running as evidence); whatever else the
log says is the classifier's (``findings.classify``: the same codes pre-flight uses for the same causes,
with this machine's fixes when the caller gave its facts). A failure nothing explains is ``build-failed``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from jitguard.findings.catalog import make
from jitguard.findings.classify import classify
from jitguard.findings.model import Finding
from jitguard.supervise.progress import BuildProgress

if TYPE_CHECKING:
    from pathlib import Path

    from jitguard.facts import Facts
    from jitguard.supervise.attempt import Attempt
    from jitguard.supervise.build_options import BuildOptions

_TAIL_LINES = 6


def build_finding(code: str, backend: str, evidence: list[str], **params: Any) -> Finding:
    """The catalog's finding ``code`` with ``evidence`` and the template ``params``."""
    return make(code, backend=backend, evidence=evidence, **params)


def _tail(lines: list[str]) -> list[str]:
    return [line for line in lines if line.strip()][-_TAIL_LINES:]


def _classify(
    text: str, returncode: int | None, backend: str, facts: Facts | None, **params: Any
) -> list[Finding]:
    return classify(text, returncode, backend=backend, facts=facts, **params)


def diagnose(
    attempt: Attempt, *, module: str, options: BuildOptions, log_path: Path
) -> tuple[list[Finding], str]:
    """The findings of ``attempt``, which failed, and the detail line ``BuildFailed`` carries."""
    params: dict[str, Any] = {"module": module, "log_path": str(log_path), "jobs": attempt.jobs}
    backend = options.backend
    progress = BuildProgress(module=module)
    for line in attempt.text:
        progress.feed(line)
    if attempt.ended == "timeout":
        finding = build_finding(
            "build-timeout",
            backend,
            [*_tail(attempt.text), *attempt.still_running],
            timeout=f"{options.timeout:g} s",
            **params,
        )
        return [finding], f"timed out after {options.timeout:g} s at step {progress.steps}"
    if attempt.ended == "stalled":
        finding = build_finding(
            "build-stalled",
            backend,
            [*_tail(attempt.text), *attempt.still_running],
            stall_timeout=f"{options.stall_timeout:g} s",
            progress=progress.steps,
            **params,
        )
        return [finding], f"no output and no CPU use for {options.stall_timeout:g} s at step {progress.steps}"
    text = "\n".join(attempt.text)
    if attempt.oom_evidence:
        oom = build_finding("build-oom-killed", backend, attempt.oom_evidence, **params)
        others = [
            f
            for f in _classify(text, attempt.returncode, backend, options.facts, **params)
            if f.code not in ("build-oom-killed", "build-failed")
        ]
        return [oom, *others], f"a compile job was killed for lack of memory even with {attempt.jobs} job(s)"
    if attempt.returncode in (-2, -15, -1, 130, 143) or "interrupted by user" in text:
        signal_name = {-2: "SIGINT", -15: "SIGTERM", -1: "SIGHUP", 130: "SIGINT", 143: "SIGTERM"}.get(
            attempt.returncode or 0, "a signal"
        )
        finding = build_finding(
            "build-interrupted", backend, _tail(attempt.text), signal=signal_name, **params
        )
        return [finding], "interrupted"
    findings = _classify(text, attempt.returncode, backend, options.facts, **params)
    if not findings:
        findings = [
            build_finding(
                "build-failed", backend, _tail(attempt.text), returncode=attempt.returncode, **params
            )
        ]
    return findings, f"ninja exited with status {attempt.returncode}"
