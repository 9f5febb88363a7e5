"""Turn a real build or load log (and its exit status) into findings from the one catalog.

Like pipx's pip-output analyser: ranked patterns pick the few lines that explain a long log. Each rule names
the finding code, the pattern, and how to pull parameters (missing versions, library names) from the match.
The first lines that match become the finding's evidence; the rest of the log stays in the file the caller
names.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from jitguard.findings.catalog import make
from jitguard.findings.checks_arch import log_params
from jitguard.findings.checks_triton import params_for as triton_params
from jitguard.findings.model import Finding
from jitguard.findings.toolchain_fixes import params_for

if TYPE_CHECKING:
    from jitguard.facts import Facts

SIGKILL_CODES = frozenset({137, -9})
MAX_EVIDENCE_LINES = 6


# A compile job killed or starved of memory, as compilers and shells print it. Not a GPU's "CUDA out of memory":
# that is a runtime error of a launch, not of a build. supervise/oom.py adds the runner's own launcher marker.
OOM_TEXT = re.compile(
    r"died due to signal 9"  # nvcc: 'cicc' died due to signal 9 (Kill signal)
    r"|Killed signal terminated program"  # gcc driver: cc1plus was SIGKILLed
    r"|^\s*Killed\b"  # the shell's report of a SIGKILLed command
    r"|(?<!CUDA )out of memory|std::bad_alloc|virtual memory exhausted|memory exhausted|Cannot allocate memory"
    r"|memory allocation fail",
    re.IGNORECASE | re.MULTILINE,
)


@dataclass(frozen=True)
class _Rule:
    code: str
    pattern: re.Pattern[str]
    params: Callable[[list[re.Match[str]]], dict[str, Any]] = lambda _matches: {}


def _glibcxx_params(matches: list[re.Match[str]]) -> dict[str, Any]:
    missing = sorted({m.group("version") for m in matches}, key=_version_key)
    required_by = sorted({m.group("by") for m in matches if m.group("by")})
    return {
        "missing": ", ".join(missing),
        "missing_versions": missing,
        "library": required_by[0] if required_by else "the built module",
        "so_path": required_by[0] if required_by else "the built module",
    }


def _arch_params(matches: list[re.Match[str]]) -> dict[str, Any]:
    """The target nvcc rejected (``compute_70``, ``sm_120f``); none for FlashInfer's own refusal line."""
    named = [m.group("arch") or m.group("value") for m in matches if not m.group("refused")]
    return {"arch": named[0]} if named else {}


def _version_key(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in re.findall(r"\d+", version))


_RULES: tuple[_Rule, ...] = (
    _Rule("disk-full", re.compile(r"No space left on device|Disk quota exceeded", re.I)),
    _Rule("build-oom-killed", OOM_TEXT),
    _Rule(
        "so-glibcxx-missing",
        re.compile(
            r"version [`'‘](?P<version>(?:GLIBCXX|CXXABI)_[\d.]+)['’] not found"
            r"(?: \(required by (?P<by>[^)]+)\))?"
        ),
        _glibcxx_params,
    ),
    # Triton's launcher build (runtime/build.py, backends/nvidia/driver.py), before FlashInfer's -lcuda rule.
    _Rule("triton-cc-missing", re.compile(r"Failed to find C compiler\. Please specify via CC")),
    _Rule("triton-python-headers-missing", re.compile(r"\bPython\.h: No such file or directory")),
    _Rule("triton-libcuda-missing", re.compile(r"libcuda\.so cannot found!|cannot find -l:libcuda\.so\.1")),
    _Rule(
        "link-missing-libcuda", re.compile(r"cannot find -lcuda\b(?!rt)|undefined reference to `cu[A-Z]\w*'")
    ),
    _Rule("link-missing-libcudart", re.compile(r"cannot find -lcudart\b")),
    _Rule(
        "cuda-headers-missing",
        re.compile(
            r"fatal error: (?P<header>(?:cuda|cuda_runtime|cuda_fp16|cuda_bf16|cub/\S+|cuda/\S+)[\w/]*\.h\w*):"
            r" No such file or directory"
        ),
        lambda ms: {"header": ms[0].group("header")},
    ),
    _Rule(
        "nvcc-too-old",
        re.compile(
            r"tensormap_replace|tensormap\.replace|Unknown modifier '\.tile'|"
            r"Feature '.*' requires .* sm_90a",
            re.I,
        ),
    ),
    _Rule(
        "nvcc-arch-unsupported",
        re.compile(
            r"Unsupported gpu architecture '(?P<arch>\w+)'"
            r"|Value '(?P<value>\w+)' is not defined for option 'gpu-(?:architecture|code)'"
            r"|(?P<refused>SM 12\.x requires CUDA >= 12\.9|SM 120 requires CUDA >= 12\.8"
            r"|SM 12\.1\+ requires CUDA >= 12\.9)"
        ),
        _arch_params,
    ),
    _Rule(
        "cutlass-dsl-compile-broken",
        re.compile(
            r"'llvm\.mlir\.global_dtors' op requires attribute 'data'"
            r"|mlir_global_dtors\(\) missing 1 required positional argument: 'data'"
            r"|GPUModuleOp.*TypeError|TypeError.*GPUModuleOp"
            r"|Unexpected instruction types specified for '_mma'"
            r"|JIT session error: Symbols not found: \[ ?cuda_dialect_"
        ),
        lambda ms: {"symptom": ms[0].group(0)},
    ),
    _Rule("nvcc-missing", re.compile(r"nvcc: (?:command )?not found|No such file or directory: '[^']*nvcc'")),
    _Rule("ninja-missing", re.compile(r"ninja: (?:command )?not found|No such file or directory: 'ninja'")),
)

_ERROR_LINE = re.compile(r"\berror\b|FAILED:|fatal|undefined reference|not found", re.I)


def classify(
    log_text: str,
    returncode: int | None,
    *,
    backend: str = "flashinfer",
    facts: Facts | None = None,
    **params: Any,
) -> list[Finding]:
    """Findings that explain ``log_text``; ``returncode`` is the process exit status (negative = signal).

    Returns ``[]`` when the log shows success (returncode 0 and no known failure line). Any non-zero status that
    no rule explains becomes ``build-failed`` with the most relevant error lines as evidence. Extra ``params``
    (e.g. ``log_path``) fill the catalog templates; with ``facts``, the fixes name what this machine has (the
    directory holding libcuda, the compiler's libstdc++), as the pre-flight finding for the same cause does.
    """
    lines = log_text.splitlines()
    findings: list[Finding] = []
    seen: set[str] = set()
    for rule in _RULES:
        matches = [m for line in lines if (m := rule.pattern.search(line))]
        if not matches:
            continue
        evidence = _unique(m.string.strip() for m in matches)[:MAX_EVIDENCE_LINES]
        if rule.code.startswith("link-"):
            evidence = _link_command(lines)[:1] + evidence
        found = rule.params(matches)
        known = _facts_params(rule.code, facts, found)
        findings.append(make(rule.code, backend=backend, evidence=evidence, **{**known, **found, **params}))
        seen.add(rule.code)
    if returncode in SIGKILL_CODES and "build-oom-killed" not in seen:
        findings.append(
            make(
                "build-oom-killed",
                backend=backend,
                evidence=[
                    f"exit status {returncode} (SIGKILL: the kernel's OOM killer or a container limit)"
                ],
                **params,
            )
        )
    if findings or returncode in (0, None):
        return findings
    return [
        make("build-failed", backend=backend, evidence=relevant_lines(lines), returncode=returncode, **params)
    ]


def _facts_params(code: str, facts: Facts | None, found: dict[str, Any]) -> dict[str, Any]:
    if code.startswith("triton-"):
        return triton_params(code, facts)
    if code == "nvcc-arch-unsupported":
        return log_params(facts, found.get("arch"))
    if facts is None:
        return {}

    return params_for(code, facts)


def relevant_lines(lines: list[str], limit: int = MAX_EVIDENCE_LINES) -> list[str]:
    """The lines a person needs from a failed log: error lines first, else the tail."""
    errors = _unique(line.strip() for line in lines if _ERROR_LINE.search(line))
    if errors:
        return errors[:limit]
    return [line for line in lines if line.strip()][-limit:]


def _link_command(lines: list[str]) -> list[str]:
    """The linker command line that failed (ninja -v prints it), as the first line of evidence."""
    for line in reversed(lines):
        if " -shared" in line and ("-lcuda" in line or "-lcudart" in line):
            return [line.strip()]
    return []


def _unique(items: Iterable[str]) -> list[str]:
    seen: dict[str, None] = {}
    for item in items:
        if item:
            seen.setdefault(item, None)
    return list(seen)


def classify_exception(
    backend: str,
    title: str,
    stage: str,
    exc: BaseException,
    *,
    alternative: str,
    facts: Facts | None = None,
) -> tuple[Finding, ...]:
    """A first-use exception of a backend (``stage``: 'load' or 'launch') -> findings: the stage finding,
    then whatever the log classifier recognises in the traceback. With ``facts``, those findings name this
    machine's fixes (the directory holding libcuda, ...) like pre-flight's. A BuildFailed from jitguard's
    supervised build arrives already classified and keeps its findings."""
    import traceback

    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    last = traceback.format_exception_only(type(exc), exc)[-1].strip()
    already = getattr(exc, "findings", None)
    if already and all(isinstance(f, Finding) for f in already):
        classified = list(already)
    else:
        try:
            classified = list(classify(text, getattr(exc, "returncode", None), backend=backend, facts=facts))
        except Exception:  # the classifier is best effort: the stage finding below still says what failed
            classified = []
    code = "gdn-first-use-failed" if stage == "load" else "gdn-launch-failed"
    head = make(
        code,
        backend=backend,
        evidence=text.strip().splitlines()[-6:],
        title=title,
        stage="build or load" if backend == "flashinfer" else "load",
        error=last[:500],
        alternative=alternative,
    )
    return (head, *classified)
