"""What jitguard finds in vLLM, SGLang and FlashInfer releases from the registry, read from their sources.

Usage:
  python benchmarks/release_report.py [--newest] [--claimed] [--vllm V ...] [--sglang V ...]
      [--flashinfer V ...] [--no-pins] [--tree DIR ...] [--work DIR] [--out DIR]

Each release is fetched with ``pip download --no-deps`` (the wheel; nothing is installed, no dependency is
needed) and only its Python sources and metadata are kept under ``--work``. ``--tree DIR`` reads a directory
that already holds a package and its ``.dist-info`` (a ``pip install --target`` directory, a vLLM tree the tests
prepared). For each release the report says, with jitguard's own finders (``facts.source_names``):
- vLLM: the choice sites jitguard wraps, found or not, and the coverage ``register()`` would log
  (``integrations.vllm.coverage``), the supported-range warning, and the FlashInfer / DSL / torch it pins;
- SGLang: the linear-attention hooks of each layout (``integrations.sglang.LAYOUTS``) and the plugin registry;
- FlashInfer: every name jitguard patches, calls or reads (``integrations.flashinfer_names``), the CuTeDSL
  compile entry jitguard hooks, and FlashInfer's own CuTeDSL disk cache: which modules keep their kernels
  there, which only in memory (jitguard's kernel cache keeps those), which nowhere (``cutedsl.compile_routes``).
The FlashInfer each engine release pins is added unless ``--no-pins``. Writes ``release_report.md`` and
``release_report.json`` to ``--out``. Exit 1 when a release jitguard claims has lost a name it uses.
"""

from __future__ import annotations

import argparse
import datetime
import json
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from packaging.requirements import InvalidRequirement, Requirement
from release_report_text import PACKAGES, PINNED, blocking, markdown

from jitguard import __version__
from jitguard.cutedsl.compile_routes import BARE, MEMORY_CACHE_MODULE, has_disk_cache, persists_itself, routes
from jitguard.decision.engine_release import covers
from jitguard.facts.flashinfer import era_of
from jitguard.facts.source_names import FOUND, NAME_NOT_FOUND, find_name, module_source
from jitguard.integrations import sglang
from jitguard.integrations.flashinfer_names import ENTRY, check
from jitguard.integrations.vllm import SITES
from jitguard.integrations.vllm import coverage as vllm_coverage

SCHEMA = "jitguard.release_report/1"
# The releases jitguard claims, what --claimed adds: vLLM's oldest supported release, the ones its real-code
# tests run and the newest (0.34.0, whose sources tests/real/test_release_report.py reads), the SGLang releases
# tested, the FlashInfer releases tested (0.6.6 here, 0.6.14 on the H200, 0.6.18).
CLAIMED = {
    "vllm": ("0.17.0", "0.21.0", "0.24.0", "0.26.0", "0.30.0", "0.33.0", "0.34.0"),
    "sglang": ("0.5.15", "0.5.16", "0.5.23"),
    "flashinfer-python": ("0.6.6", "0.6.14", "0.6.18"),
}


class ReportError(Exception):
    """A release that cannot be fetched or read: the message says which and why."""


@dataclass(frozen=True)
class Tree:
    dist: str  # "vllm", "sglang", "flashinfer-python"
    version: str
    root: Path  # the directory holding the package
    source: str  # where it came from: "registry" or the --tree path


# ---- fetching ----------------------------------------------------------------------------------------------
def newest(dist: str) -> str:
    """The newest release of ``dist`` the registry has (``pip index versions``)."""
    ran = _pip("index", "versions", dist)
    match = re.search(rf"^{re.escape(dist)} \(([^)]+)\)", ran, re.MULTILINE | re.IGNORECASE)
    if match is None:
        raise ReportError(f"`pip index versions {dist}` named no release:\n{ran[-2000:]}")
    return match.group(1)


def _pip(*args: str) -> str:
    cmd = [sys.executable, "-m", "pip", *args, "--disable-pip-version-check", "--no-input"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900, stdin=subprocess.DEVNULL)
    if proc.returncode != 0:
        raise ReportError(
            f"`{shlex.join(cmd)}` exited {proc.returncode}:\n{(proc.stdout + proc.stderr)[-2000:]}"
        )
    return proc.stdout


def fetch(dist: str, version: str, work: Path) -> Tree:
    """``dist==version``'s Python sources and metadata under ``work`` (downloaded once, the wheel then
    removed)."""
    root = work / f"{dist}-{version}"
    if (root / ".complete").is_file():
        return Tree(dist, version, root, "registry")
    with tempfile.TemporaryDirectory(prefix="release-report-", dir=work) as download:
        _pip("download", "--no-deps", "--only-binary", ":all:", "-d", download, f"{dist}=={version}")
        wheels = list(Path(download).glob("*.whl"))
        if len(wheels) != 1:
            raise ReportError(f"pip downloaded {len(wheels)} wheels for {dist}=={version}, expected one")
        shutil.rmtree(root, ignore_errors=True)
        with zipfile.ZipFile(wheels[0]) as wheel:
            keep = [n for n in wheel.namelist() if n.endswith(".py") or n.endswith(".dist-info/METADATA")]
            wheel.extractall(root, keep)
    (root / ".complete").write_text(f"{dist}=={version}\n")
    return Tree(dist, version, root, "registry")


def trees_in(directory: Path) -> list[Tree]:
    """Every release of a known package in ``directory`` (its package and its ``.dist-info``)."""
    found = []
    for dist, package in PACKAGES.items():
        prefix = dist.replace("-", "_")
        infos = sorted(directory.glob(f"{prefix}-*.dist-info"))
        if infos and (directory / package).is_dir():
            version = infos[0].name[len(prefix) + 1 : -len(".dist-info")]
            found.append(Tree(dist, version, directory, str(directory)))
    if not found:
        raise ReportError(f"{directory} holds no vllm, sglang or flashinfer package with its .dist-info")
    return found


def pins(tree: Tree) -> dict[str, str]:
    """What the release requires of FlashInfer, the DSL and torch, as its metadata says."""
    metadata = next(tree.root.glob(f"{tree.dist.replace('-', '_')}-*.dist-info/METADATA"), None)
    found: dict[str, str] = {}
    for line in metadata.read_text(errors="replace").splitlines() if metadata else ():
        if line.startswith("Requires-Dist:"):
            try:
                req = Requirement(line.split(":", 1)[1].strip())
            except InvalidRequirement:
                continue
            name = re.sub(r"[-_.]+", "-", req.name).lower()
            if name in PINNED and (req.marker is None or req.marker.evaluate({"extra": ""})):
                found.setdefault(name, str(req.specifier) or "any")
    return found


# ---- reading what jitguard finds ---------------------------------------------------------------------------
def read_vllm(tree: Tree) -> dict[str, Any]:
    path = [str(tree.root)]
    found = vllm_coverage.coverage(tree.version, tree.root)
    # Expected: the release lies in the site's range, or coverage (judging a release outside the known range
    # as the nearest known one) counts it as missing.
    missing = {(m.module, m.target) for c in found.choices for m in c.missing}
    sites = [
        {
            **site.to_json(),
            "title": site.choice.title,
            "state": find_name(site.module, site.target, path),
            "expected": covers(site.releases, tree.version) or (site.module, site.target) in missing,
        }
        for site in SITES
    ]
    return {
        "coverage": found.to_json(),
        "unguarded": found.unguarded,
        "range_warning": vllm_coverage.drift_warning(tree.version),
        "sites": sites,
    }


def read_sglang(tree: Tree) -> dict[str, Any]:
    path = [str(tree.root)]
    utils = module_source(sglang.UTILS, path)
    source = utils.read_text(encoding="utf-8") if utils is not None else ""

    def state(layout: sglang.Layout) -> str:
        """Found as the plugin finds it: the function, and a table layout's dict too (same function name)."""
        found = find_name(sglang.UTILS, layout.function, path)
        return NAME_NOT_FOUND if found == FOUND and not layout.found_in_source(source) else found

    hooks = [
        {
            "layout": layout.name,
            "target": layout.target + (f" + {layout.table}" if layout.table else ""),
            "releases": layout.releases,
            "state": state(layout),
        }
        for layout in sglang.LAYOUTS
    ]
    hooks.append(
        {
            "layout": "request (<= 0.5.18)",
            "target": sglang.REQUEST_HOOK,
            "releases": "0.5.11-0.5.18",
            "state": find_name(sglang.SERVER_ARGS, "ServerArgs._handle_linear_attn_backend", path),
        }
    )
    registry = find_name("sglang.srt.plugins.hook_registry", "HookRegistry.register", path)
    layout = next((h["layout"] for h in hooks[: len(sglang.LAYOUTS)] if h["state"] == FOUND), None)
    return {
        "layout": layout,
        "guarded": layout is not None and registry == FOUND,
        "plugin_registry": registry,
        "hooks": hooks,
    }


def read_flashinfer(tree: Tree) -> dict[str, Any]:
    package = tree.root / "flashinfer"
    checks = check(str(tree.root), tree.version)
    entry = next(c for c in checks if c.name == ENTRY)
    compile_cache = package.joinpath(*MEMORY_CACHE_MODULE.split(".")[1:]).with_suffix(".py")
    kernels = routes(package)
    entry_persists = compile_cache.is_file() and persists_itself(compile_cache)
    return {
        "era": era_of(tree.version)[0],
        "names": [c.to_json() for c in checks],
        "drifted": [f"{c.name.module}.{c.name.target}: {c.state}" for c in checks if c.drifted],
        "compile_entry": {
            "target": f"{entry.name.module}.{entry.name.target.split(',')[0]}",
            "state": entry.state,
            "flashinfer_persists_it": entry_persists,
            "jitguard": "keeps its kernels"
            if entry.state == FOUND and not entry_persists
            else "stands aside",
        },
        "disk_cache": has_disk_cache(package),
        "routes": dict(Counter(k.route for k in kernels)),
        # Those no cache keeps are only counted: hundreds of modules, none of them jitguard's business.
        "kernels": [
            {"module": k.module, "route": k.route, "archs": list(k.archs)} for k in kernels if k.route != BARE
        ],
    }


READERS = {"vllm": read_vllm, "sglang": read_sglang, "flashinfer-python": read_flashinfer}


def read(tree: Tree) -> dict[str, Any]:
    claimed = tree.version in CLAIMED[tree.dist]
    return {
        "dist": tree.dist,
        "version": tree.version,
        "source": tree.source,
        "claimed": claimed,
        "pins": pins(tree),
        **READERS[tree.dist](tree),
    }


def _fetched(dist: str, version: str, work: Path) -> dict[str, Any]:
    """The release read from the registry, or what kept it from being read (a pin to a release the registry
    does not have is a finding, not a reason to stop)."""
    try:
        return read(fetch(dist, version, work))
    except ReportError as exc:
        lines = [line for line in str(exc).splitlines() if line.startswith("ERROR:")] or str(exc).splitlines()
        return {"dist": dist, "version": version, "claimed": version in CLAIMED[dist], "error": lines[-1]}


# ---- the command -------------------------------------------------------------------------------------------
def _wanted(args: argparse.Namespace) -> tuple[dict[str, list[str]], dict[str, str]]:
    wanted: dict[str, list[str]] = {
        "vllm": list(args.vllm),
        "sglang": list(args.sglang),
        "flashinfer-python": list(args.flashinfer),
    }
    latest = {dist: newest(dist) for dist in PACKAGES} if args.newest else {}
    for dist, version in latest.items():
        wanted[dist].append(version)
    if args.claimed:
        for dist, versions in CLAIMED.items():
            wanted[dist].extend(versions)
    return wanted, latest


def _pinned_flashinfer(entries: list[dict[str, Any]]) -> list[str]:
    """The exact flashinfer-python releases engine releases pin ('==0.7.2.post1')."""
    return [
        e["pins"]["flashinfer-python"][2:]
        for e in entries
        if e.get("pins", {}).get("flashinfer-python", "").startswith("==")
    ]


def build_report(args: argparse.Namespace) -> dict[str, Any]:
    wanted, latest = _wanted(args)
    trees = [t for directory in args.tree for t in trees_in(Path(directory))]
    args.work.mkdir(parents=True, exist_ok=True)
    entries = [read(t) for t in trees]
    entries += [
        _fetched(dist, v, args.work) for dist in ("vllm", "sglang") for v in dict.fromkeys(wanted[dist])
    ]
    if not args.no_pins:
        wanted["flashinfer-python"].extend(_pinned_flashinfer(entries))
    seen = {(t.dist, t.version) for t in trees}
    for version in dict.fromkeys(wanted["flashinfer-python"]):
        if ("flashinfer-python", version) not in seen:
            entries.append(_fetched("flashinfer-python", version, args.work))
    order = {dist: i for i, dist in enumerate(PACKAGES)}
    entries.sort(key=lambda e: (order[e["dist"]], _sortable(e["version"])))
    return {
        "schema": SCHEMA,
        "jitguard": __version__,
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "command": args.command,
        "newest": latest,
        "releases": entries,
    }


def _sortable(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in re.findall(r"\d+", version))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--vllm", nargs="*", default=[], metavar="VERSION")
    parser.add_argument("--sglang", nargs="*", default=[], metavar="VERSION")
    parser.add_argument("--flashinfer", nargs="*", default=[], metavar="VERSION")
    parser.add_argument(
        "--newest", action="store_true", help="add the newest release of each on the registry"
    )
    parser.add_argument("--claimed", action="store_true", help="add the releases jitguard claims")
    parser.add_argument("--no-pins", action="store_true", help="do not add the FlashInfer each engine pins")
    parser.add_argument("--tree", nargs="*", default=[], metavar="DIR", help="read releases already in DIR")
    parser.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "jitguard-release-report")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results"))
    args = parser.parse_args(argv)
    args.command = shlex.join(
        ["python", "benchmarks/release_report.py", *(sys.argv[1:] if argv is None else argv)]
    )
    try:
        report = build_report(args)
    except ReportError as exc:
        print(f"release_report: {exc}", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "release_report.json").write_text(json.dumps(report, indent=1) + "\n")
    (args.out / "release_report.md").write_text(markdown(report))
    problems = [p for e in report["releases"] for p in blocking(e)]
    print(f"release_report: {len(report['releases'])} releases read; {args.out}/release_report.{{md,json}}")
    for problem in problems:
        print(f"release_report: a claimed release lost a name jitguard uses: {problem}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
