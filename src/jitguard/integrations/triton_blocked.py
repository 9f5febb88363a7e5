"""Triton's JIT at an engine's start: can the Triton/FLA path the engine takes build Triton's launcher here, and
the one line that says so when it cannot.

The engine plugins cannot move an engine to jitguard's PyTorch backend: when FlashInfer is out, the engine's
own Triton (FLA) kernels run, and each first launch compiles Triton's C launcher. Without a C compiler,
Python.h or a libcuda Triton finds, the engine dies at its first Triton kernel, often after minutes of model
loading and torch.compile. This says it in the first second, with the fix, and with FlashInfer's block
beside it when that is why the engine is on Triton (fix either one and restart).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING

from jitguard.findings import checks_triton

if TYPE_CHECKING:
    from jitguard.facts import Facts
    from jitguard.findings.model import Finding

log = logging.getLogger("jitguard.engine")


def blocks(facts: Facts) -> list[Finding]:
    """The findings that stop an installed Triton's JIT here: what its launcher build lacks. Not the GPU, FLA
    or package findings of jitguard's own triton backend: the engines bring their own FLA copy and need
    triton to start at all."""
    return [
        f for f in checks_triton.check(facts, "triton") if f.blocking and f.code in checks_triton.JIT_CODES
    ]


def blocked_message(engine: str, what: str, triton: Sequence[Finding], flashinfer: Finding | None) -> str:
    """One line: ``engine``'s ``what`` (e.g. "GDN prefill") runs on Triton, whose JIT cannot work here
    (``triton``: its blocking findings), and FlashInfer's block when FlashInfer was the engine's first choice."""
    causes = "; ".join(f"[{f.code}] {f.title}{_fix(f)}" for f in triton)
    line = f"jitguard: {engine} runs {what} on Triton/FLA here, but Triton's JIT cannot build its launcher: {causes}."
    if flashinfer is not None:
        line += f" FlashInfer is blocked too: [{flashinfer.code}] {flashinfer.title}{_fix(flashinfer)}."
        line += (
            " Both fast paths are out: the engine fails at its first Triton kernel; fix either and restart."
        )
    else:
        line += " The engine fails at its first Triton kernel; fix it and restart."
    return line + " Details: `jitguard doctor --backend triton`."


def _fix(finding: Finding) -> str:
    return f" (fix: {finding.fixes[0].render()})" if finding.fixes else ""


def warn_if_blocked(engine: str, what: str, facts: Facts, flashinfer: Finding | None = None) -> bool:
    """Log ``blocked_message`` as an error when Triton's JIT is blocked here; True when it was. A fault in
    this check is logged at debug level and changes nothing: the engine's path stands either way."""
    try:
        found = blocks(facts)
    except Exception:
        log.debug("jitguard: could not check Triton's JIT prerequisites", exc_info=True)
        return False
    if found:
        log.error("%s", blocked_message(engine, what, found, flashinfer))
    return bool(found)
