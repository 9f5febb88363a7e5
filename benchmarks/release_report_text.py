"""``benchmarks/release_report.py``'s report as markdown, and what a claimed release lost: one table per engine
(rows: what jitguard looks for; columns: the releases read), then the releases that could not be read."""

from __future__ import annotations

from typing import Any

from jitguard.facts.source_names import FOUND

PACKAGES = {"vllm": "vllm", "sglang": "sglang", "flashinfer-python": "flashinfer"}  # distribution -> package
PINNED = ("flashinfer-python", "nvidia-cutlass-dsl", "torch")


def blocking(entry: dict[str, Any]) -> list[str]:
    """What a claimed release lost: a name jitguard uses there, no longer found."""
    if not entry["claimed"]:
        return []
    if "error" in entry:
        return [entry["error"]]
    if entry["dist"] == "vllm":
        return [entry["unguarded"]] if entry["unguarded"] else []
    if entry["dist"] == "sglang":
        return [] if entry["guarded"] else ["no linear-attention hook jitguard knows"]
    return list(entry["drifted"])


# ---- the tables --------------------------------------------------------------------------------------------
def _cell(state: str, expected: bool | None = True) -> str:
    if state == FOUND:
        return "found"
    return f"**{state}**" if expected else f"({state})"


def _matrix(rows: list[tuple[str, list[str]]], releases: list[str]) -> list[str]:
    lines = ["| | " + " | ".join(releases) + " |", "|---|" + "---|" * len(releases)]
    lines += [f"| {label} | " + " | ".join(cells) + " |" for label, cells in rows]
    return lines


def _header(entries: list[dict[str, Any]]) -> list[str]:
    return [f"{e['version']}{' (claimed)' if e['claimed'] else ''}" for e in entries]


def _pins(entries: list[dict[str, Any]]) -> list[tuple[str, list[str]]]:
    return [(f"pins {name}", [e["pins"].get(name, "-") for e in entries]) for name in PINNED]


def vllm_section(entries: list[dict[str, Any]]) -> list[str]:
    if not entries:
        return []
    rows = [
        (
            f"{s['title']}: `{s['module']}.{s['target']}` ({s['releases']})",
            [_cell(e["sites"][i]["state"], e["sites"][i]["expected"]) for e in entries],
        )
        for i, s in enumerate(entries[0]["sites"])
    ]
    rows.append(("coverage register() logs", [e["coverage"]["summary"].split(": ", 1)[1] for e in entries]))
    rows.append(
        (
            "not guarded",
            [e["unguarded"].removeprefix("not guarded: ") if e["unguarded"] else "-" for e in entries],
        )
    )
    rows.append(("outside the supported range", ["yes" if e["range_warning"] else "no" for e in entries]))
    warnings = sorted({e["range_warning"] for e in entries if e["range_warning"]})
    return [
        "## vLLM",
        "",
        *_matrix(rows + _pins(entries), _header(entries)),
        "",
        *(f"- {w}" for w in warnings),
        "",
    ]


def sglang_section(entries: list[dict[str, Any]]) -> list[str]:
    if not entries:
        return []
    rows = [
        (
            f"{h['layout']}: `{h['target']}` ({h['releases']})",
            [_cell(e["hooks"][i]["state"], False) for e in entries],
        )
        for i, h in enumerate(entries[0]["hooks"])
    ]
    rows.append(("plugin registry `HookRegistry.register`", [_cell(e["plugin_registry"]) for e in entries]))
    rows.append(("layout jitguard hooks", [e["layout"] or "**none**" for e in entries]))
    return ["## SGLang", "", *_matrix(rows + _pins(entries), _header(entries)), ""]


def flashinfer_section(entries: list[dict[str, Any]]) -> list[str]:
    if not entries:
        return []
    names = entries[0]["names"]
    rows = [
        (
            f"{n['use']} `{n['module']}`: {n['target']} ({n['releases']})",
            [_cell(e["names"][i]["state"], e["names"][i]["expected"]) for e in entries],
        )
        for i, n in enumerate(names)
    ]
    rows.append(("era", [e["era"] for e in entries]))
    rows.append(
        (
            "CuTeDSL compile entry jitguard hooks",
            [
                e["compile_entry"]["jitguard"] if e["compile_entry"]["state"] == FOUND else "-"
                for e in entries
            ],
        )
    )
    rows.append(("FlashInfer's CuTeDSL disk cache", ["yes" if e["disk_cache"] else "no" for e in entries]))
    for route, what in (
        ("disk", "on FlashInfer's disk"),
        ("memory", "in memory only (jitguard keeps)"),
        ("bare", "nowhere (own dict)"),
    ):
        rows.append(
            (f"modules compiling CuTeDSL kernels {what}", [str(e["routes"].get(route, 0)) for e in entries])
        )
    for route, what in (
        ("disk", "GDN kernels on FlashInfer's disk"),
        ("memory", "GDN kernels jitguard keeps"),
    ):
        rows.append((what, [_gdn(e, route) for e in entries]))
    return [
        "## FlashInfer",
        "",
        "found: the name is there; **bold**: expected in this release and not found; (parenthesised): not expected.",
        "",
        *_matrix(rows, _header(entries)),
        "",
    ]


def _gdn(entry: dict[str, Any], route: str) -> str:
    kernels = [k for k in entry["kernels"] if k["route"] == route and "gdn" in k["module"]]
    return (
        "<br>".join(
            f"{k['module'].removeprefix('flashinfer.')} ({', '.join(k['archs']) or 'any'})" for k in kernels
        )
        or "-"
    )


def markdown(report: dict[str, Any]) -> str:
    by = {
        dist: [e for e in report["releases"] if e["dist"] == dist and "error" not in e] for dist in PACKAGES
    }
    unread = [f"- {e['dist']} {e['version']}: {e['error']}" for e in report["releases"] if "error" in e]
    lines = [
        "# What jitguard finds in vLLM, SGLang and FlashInfer releases",
        "",
        f"{report['date']}, jitguard {report['jitguard']}; newest on the registry: "
        + ", ".join(f"{d} {v}" for d, v in report["newest"].items())
        + ".",
        "",
        f"Command: `{report['command']}`",
        "",
        "Read from each release's wheel (`pip download --no-deps`, sources only, nothing imported) with jitguard's own "
        "finders; the script's docstring says what each row means.",
        "",
        *vllm_section(by["vllm"]),
        *sglang_section(by["sglang"]),
        *flashinfer_section(by["flashinfer-python"]),
    ]
    if unread:
        lines += ["## Releases that could not be read", "", *unread, ""]
    problems = [f"- {e['dist']} {e['version']}: {p}" for e in report["releases"] for p in blocking(e)]
    lines += ["## Claimed releases that lost a name jitguard uses", "", *(problems or ["none"]), ""]
    return "\n".join(lines)
