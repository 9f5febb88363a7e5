"""The machine summary at the top of `jitguard doctor`: one line per concern, from the facts alone."""

from __future__ import annotations

from collections.abc import Callable

from jitguard.config import format_bytes
from jitguard.facts import Facts, FactUnavailable


def machine_rows(facts: Facts) -> list[tuple[str, str]]:
    rows = (
        ("GPU", _gpu),
        ("CPU / memory", _memory),
        ("CUDA toolchain", _toolchain),
        ("linker", _link),
        ("libstdc++", _libstdcxx),
        ("FlashInfer", _flashinfer),
        ("packages", _packages),
    )
    return [(label, _row(describe, facts)) for label, describe in rows] + [
        ("fingerprint", f"{facts.fingerprint} {FINGERPRINT_NOTE}")
    ]


# One line on what the fingerprint is, where `jitguard cache list` shows other ones (README.md, "Fingerprints").
FINGERPRINT_NOTE = (
    "(this environment's: the failure cache's key for what runs here; `jitguard cache list` shows each "
    "record's, e.g. `jitguard build flashinfer-gdn` records under its own environment's)"
)


def _row(describe: Callable[[Facts], str], facts: Facts) -> str:
    """One row; a fact that could not be collected reads as unknown, with why."""
    try:
        return describe(facts)
    except FactUnavailable as exc:
        return f"unknown: {exc.error}"


def _gpu(facts: Facts) -> str:
    gpu = facts.gpu
    if not gpu.devices:
        return f"none ({gpu.reason})" if gpu.reason else "none"
    names = ", ".join(f"{d.name} (sm {d.capability or '?'})" for d in gpu.devices)
    return f"{names}; driver {gpu.driver_version or '?'} (CUDA {gpu.cuda_driver_version or '?'})"


def _memory(facts: Facts) -> str:
    mem = facts.memory
    available = format_bytes(mem.available) if mem.available is not None else "unknown"
    limit = (
        f", cgroup {mem.cgroup_version} limit {format_bytes(mem.cgroup_limit)}" if mem.cgroup_limit else ""
    )
    return f"{mem.cpu_limit} CPUs, {available} available (decided by {mem.limited_by or '?'}){limit}"


def _toolchain(facts: Facts) -> str:
    tc = facts.toolchain
    parts = [f"CUDA_HOME {tc.cuda_home or 'not found'} (from {tc.cuda_home_source})"]
    for tool in (tc.nvcc, tc.ninja, tc.cxx):
        parts.append(f"{tool.name} {tool.version}" if tool.path else f"{tool.name} missing")
    return "; ".join(parts)


def _link(facts: Facts) -> str:
    link = facts.link
    verdict = {True: "links", False: "does not link"}
    return f"-lcudart {verdict[link.cudart_links]}, -lcuda {verdict[link.cuda_links]} (trial link)"


def _libstdcxx(facts: Facts) -> str:
    lib = facts.libstdcxx
    return (
        f"compiler's {lib.compiler_lib or '?'} up to {lib.compiler_max or '?'}; "
        f"runtime {lib.runtime_lib or '?'} up to {lib.runtime_max or '?'}"
    )


def _flashinfer(facts: Facts) -> str:
    fi = facts.flashinfer
    if not fi.installed:
        return "not installed"
    text = f"{fi.version}, {fi.era} era"
    if fi.gdn_module:
        text += f", GDN module {fi.gdn_module} ({fi.gdn_tu_count} TUs)"
    if fi.prebuilt_gdn:
        text += f", prebuilt at {fi.prebuilt_gdn}"
    return text + f"; workspace {fi.workspace_dir}"


def _packages(facts: Facts) -> str:
    return ", ".join(f"{p.name} {p.version}" for p in facts.packages.installed) or "none of interest"
