"""Pre-flight checks of Triton's JIT on this host (``facts.triton_jit``): the C compiler, Python.h and libcuda
its launcher build needs, proven by the real stub build. Triton installed only (else ``triton-missing`` says
it all).

libcuda is judged only where a GPU is present: a GPU-less host has no driver, its Triton backend is already
blocked by ``gpu-none``, and a missing libcuda there is expected, not a second cause.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

from jitguard.facts import FactUnavailable
from jitguard.facts.triton_jit import python_include_dir
from jitguard.findings.catalog import make
from jitguard.findings.checks_jitguard import unit
from jitguard.findings.model import Finding

if TYPE_CHECKING:
    from jitguard.facts import Facts
    from jitguard.facts.triton_jit import TritonJitFacts

BACKEND = "triton"
# The codes that say Triton's JIT cannot build its launcher here: every Triton kernel fails, the engines' too.
JIT_CODES = frozenset(
    {
        "triton-cc-missing",
        "triton-python-headers-missing",
        "triton-libcuda-missing",
        "triton-launcher-build-failed",
    }
)


def check(facts: Facts, backend: str) -> list[Finding]:
    if backend != BACKEND:
        return []
    return unit(BACKEND, lambda: _launcher(facts)) + unit(BACKEND, lambda: _libcuda(facts))


def _launcher(facts: Facts) -> list[Finding]:
    jit = facts.triton_jit
    if jit is None:
        return []
    build = jit.compile
    if build.status == "cc-missing":
        return [make("triton-cc-missing", backend=BACKEND, evidence=_cc_evidence(jit), **cc_params(jit))]
    if build.status == "headers-missing" or not jit.python_h:
        evidence = [f"{jit.python_include}/Python.h: no such file", *build.evidence[1:]]
        return [
            make("triton-python-headers-missing", backend=BACKEND, evidence=evidence, **header_params(jit))
        ]
    if build.status != "ok":
        return [
            make(
                "triton-launcher-build-failed",
                backend=BACKEND,
                evidence=build.evidence,
                compiler=jit.cc.path or jit.cc.command or "the C compiler",
            )
        ]
    return []


def _libcuda(facts: Facts) -> list[Finding]:
    jit = facts.triton_jit
    if jit is None or not facts.gpu.present:
        return []
    lookup = jit.libcuda
    if lookup.found and jit.link.status in ("ok", "not-run"):
        return []
    if lookup.found and jit.link.status != "libcuda-missing":
        return []  # another link error: the launcher check names the compiler's own
    evidence = [f"Triton {jit.triton_version}: {lookup.error}"] if lookup.error else list(jit.link.evidence)
    return [make("triton-libcuda-missing", backend=BACKEND, evidence=evidence, **libcuda_params(jit))]


def _cc_evidence(jit: TritonJitFacts) -> list[str]:
    cc = jit.cc
    if cc.source == "CC":
        return [f"CC={cc.command}: {jit.compile.output.strip() or 'not found'}"]
    return ["CC is not set; neither gcc nor clang is on PATH"]


def cc_params(jit: TritonJitFacts | None) -> dict[str, Any]:
    if jit is None:
        return {"detail": ""}
    cc = jit.cc
    detail = (
        f"CC={cc.command!r} does not run here. "
        if cc.source == "CC"
        else "CC is not set and neither gcc nor clang is on PATH. "
    )
    found: dict[str, Any] = {"detail": detail}
    if cc.others:
        found["compiler"] = cc.others[0]
    return found


def header_params(jit: TritonJitFacts | None) -> dict[str, Any]:
    if jit is None:  # a log alone: this interpreter's, which is the one Triton builds for
        return {"include": python_include_dir(), "python_version": "{}.{}".format(*sys.version_info[:2])}
    return {"include": jit.python_include, "python_version": jit.python_version}


def libcuda_params(jit: TritonJitFacts | None) -> dict[str, Any]:
    if jit is None:
        return {"triton_version": "", "link_flag": "-lcuda (up to 3.5) or -l:libcuda.so.1", "detail": ""}
    lookup = jit.libcuda
    if lookup.error:
        detail = f"Here it fails: {lookup.error}"
    else:
        where = ", ".join(lookup.dirs) or "no directory"
        detail = f"It finds {where} ({lookup.source}), and the link with {lookup.link_flag} fails there."
        if lookup.link_flag == "-lcuda":
            detail += " Triton before 3.6 needs the unversioned libcuda.so next to libcuda.so.1."
    found: dict[str, Any] = {
        "triton_version": jit.triton_version,
        "link_flag": lookup.link_flag,
        "detail": detail,
    }
    if lookup.fix_dirs:
        found["fix_dir"] = lookup.fix_dirs[0]
    return found


def params_for(code: str, facts: Facts | None) -> dict[str, Any]:
    """The fix parameters this machine's facts give a classified log finding of ``code``."""
    try:
        jit = facts.triton_jit if facts is not None else None
        return _params(code, jit)
    except FactUnavailable:
        return _params(code, None)


def _params(code: str, jit: TritonJitFacts | None) -> dict[str, Any]:
    if code == "triton-cc-missing":
        return cc_params(jit)
    if code == "triton-python-headers-missing":
        return header_params(jit)
    if code == "triton-libcuda-missing":
        return libcuda_params(jit)
    return {}
