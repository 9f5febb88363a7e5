"""``benchmarks/release_report.py`` on real releases: vLLM 0.33.0 and 0.34.0 fetched from the registry (the
wheels' sources, kept under the shared test cache: ~10 s per release the first time, under a second after),
FlashInfer 0.6.6 as installed here and 0.7.4 as the tests prepare it, then the same vLLM with one choice site
renamed, as a new release that moved it would be. The same sources show where each vLLM reaches FlashInfer's
sampling kernels: only through the names jitguard wraps."""

from __future__ import annotations

import ast
import importlib.util
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from flashinfer_releases import ROOT, prepared
from jitguard.facts.source_names import FOUND, find_name
from jitguard.integrations.vllm import sampler

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
VLLM = "0.33.0"
NEWEST = "0.34.0"  # the V1 model runner, and TopKTopPSampler with it, removed
SAMPLER_FILE = Path("vllm/v1/sample/ops/topk_topp_sampler.py")


@dataclass(frozen=True)
class Ran:
    code: int
    stdout: str
    stderr: str
    report: dict[str, Any]
    markdown: str

    def entry(self, dist: str, version: str) -> dict[str, Any]:
        found = [e for e in self.report["releases"] if (e["dist"], e["version"]) == (dist, version)]
        assert len(found) == 1, [(e["dist"], e["version"]) for e in self.report["releases"]]
        return found[0]


def _run(out: Path, *args: str) -> Ran:
    proc = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "release_report.py"), *args, "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=900,
        stdin=subprocess.DEVNULL,
        cwd=REPO,
        env={**{k: v for k, v in os.environ.items() if k != "PYTHONPATH"}, "PYTHONPATH": str(REPO / "src")},
    )
    assert proc.returncode in (0, 1), f"exit {proc.returncode}:\n{(proc.stdout + proc.stderr)[-6000:]}"
    assert "Traceback" not in proc.stderr, proc.stderr[-6000:]
    report = json.loads((out / "release_report.json").read_text())
    return Ran(proc.returncode, proc.stdout, proc.stderr, report, (out / "release_report.md").read_text())


def _installed_flashinfer() -> Path:
    spec = importlib.util.find_spec("flashinfer")
    if spec is None or spec.origin is None:
        pytest.skip("no FlashInfer installed here")
    return Path(spec.origin).parents[1]


@pytest.fixture(scope="module")
def work() -> Path:
    return ROOT / "release-report"


@pytest.fixture(scope="module")
def ran(work: Path, tmp_path_factory: pytest.TempPathFactory) -> Ran:
    trees = [str(_installed_flashinfer()), str(prepared("0.7.4"))]
    out = tmp_path_factory.mktemp("report")
    return _run(out, "--vllm", VLLM, NEWEST, "--tree", *trees, "--no-pins", "--work", str(work))


def test_the_claimed_vllm_has_every_choice_site_and_its_pins(ran: Ran) -> None:
    vllm = ran.entry("vllm", VLLM)
    assert vllm["claimed"] and vllm["source"] == "registry"
    assert vllm["coverage"]["summary"] == f"vLLM {VLLM}: 6 of 6 choice sites found"
    assert (vllm["unguarded"], vllm["range_warning"]) == (None, None)
    assert vllm["pins"]["flashinfer-python"] == "==0.7.2.post1"
    assert vllm["pins"]["nvidia-cutlass-dsl"] == "==4.8.0"
    sampler = [s for s in vllm["sites"] if s["target"] == "flashinfer_sampler_supported"]
    assert [s["state"] for s in sampler] == ["found"]
    assert ran.code == 0, ran.stderr[-4000:]


def test_the_newest_vllm_has_every_choice_guarded_without_the_v1_sampler(ran: Ran) -> None:
    vllm = ran.entry("vllm", NEWEST)
    assert vllm["claimed"] and vllm["source"] == "registry"
    assert vllm["coverage"]["summary"] == f"vLLM {NEWEST}: 6 of 6 choice sites found"
    assert (vllm["unguarded"], vllm["range_warning"]) == (None, None)
    sites = {s["target"]: (s["state"], s["expected"]) for s in vllm["sites"] if s["choice"] == "sampler"}
    assert sites == {
        sampler.PREDICATE: ("found", True),
        f"{sampler.CLASS}.__init__": ("name not found", False),  # its range ended with 0.33
        sampler.SAMPLE: ("found", True),
    }
    assert ran.code == 0, ran.stderr[-4000:]


def _reaches_flashinfer_sampling(node: ast.AST) -> bool:
    """``flashinfer.sampling.x``, ``import flashinfer.sampling``, ``from flashinfer.sampling import x`` or
    ``from flashinfer import sampling``."""
    if isinstance(node, ast.Attribute):
        return isinstance(node.value, ast.Name) and (node.value.id, node.attr) == ("flashinfer", "sampling")
    if isinstance(node, ast.Import):
        return any(a.name.startswith("flashinfer.sampling") for a in node.names)
    if isinstance(node, ast.ImportFrom):
        if node.module == "flashinfer":
            return any(a.name == "sampling" for a in node.names)
        return (node.module or "").startswith("flashinfer.sampling")
    return False


def _sampling_paths(root: Path) -> tuple[set[tuple[str, str]], set[tuple[str, str]]]:
    """What a vLLM tree does with FlashInfer's sampler: (module, function) wherever its code reaches
    FlashInfer's sampling kernels (``<module>`` at top level, ``Class.method`` in a class), and (module, name)
    for each name imported from the sampler's module that picks or runs FlashInfer (``flashinfer*``) or is
    the V1 sampler. Only files that could are parsed (a few dozen of 3,600)."""
    reach: set[tuple[str, str]] = set()
    imported: set[tuple[str, str]] = set()
    for path in sorted((root / "vllm").rglob("*.py")):
        text = path.read_text(errors="replace")
        if "topk_topp_sampler" not in text and ("flashinfer" not in text or "sampl" not in text):
            continue
        module = ".".join(path.relative_to(root).with_suffix("").parts)
        todo: list[tuple[ast.AST, tuple[str, ...]]] = [(ast.parse(text), ())]
        while todo:
            node, scope = todo.pop()
            if _reaches_flashinfer_sampling(node):
                reach.add((module, ".".join(scope) or "<module>"))
            if isinstance(node, ast.ImportFrom) and node.module == sampler.MODULE:
                names = [a.name for a in node.names]
                imported.update(
                    (module, n) for n in names if n.startswith("flashinfer") or n == sampler.CLASS
                )
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                scope = (*scope, node.name)
            todo.extend((child, scope) for child in ast.iter_child_nodes(node))
    return reach, imported


@pytest.mark.parametrize("version", [VLLM, NEWEST])
def test_every_path_to_flashinfers_sampling_kernels_goes_through_a_guarded_name(
    ran: Ran, work: Path, version: str
) -> None:
    root = work / f"vllm-{version}"
    reach, imported = _sampling_paths(root)
    assert reach == {(sampler.MODULE, sampler.SAMPLE)}
    guarded = {sampler.PREDICATE, sampler.SAMPLE, sampler.CLASS}
    assert {name for _, name in imported} <= guarded, imported
    v2 = "vllm.v1.worker.gpu.sample.sampler"  # the V2 runner: asks the predicate, calls flashinfer_sample
    assert {(v2, sampler.PREDICATE), (v2, sampler.SAMPLE)} <= imported
    # the V1 runner (to 0.33) builds TopKTopPSampler; 0.34 has none left
    assert any(name == sampler.CLASS for _, name in imported) == (version == VLLM)
    # jitguard's first-use fallback calls this name of the release
    assert find_name(sampler.MODULE, "apply_top_k_top_p", [str(root)]) == FOUND


def test_flashinfer_066_is_the_nvcc_era_jitguard_routes_by_its_module_getter(ran: Ran) -> None:
    fi = ran.entry("flashinfer-python", "0.6.6")
    assert (fi["era"], fi["disk_cache"], fi["drifted"]) == ("nvcc", False, [])
    names = {n["target"]: n["state"] for n in fi["names"]}
    assert names["get_gdn_prefill_module"] == "found"
    assert names["cached_compile, _in_mem_compile_cache, _compile_options_key"] == "module missing"
    assert fi["compile_entry"]["state"] == "module missing"


def test_flashinfer_074_has_its_own_disk_cache_and_jitguard_keeps_only_the_memory_only_kernels(
    ran: Ran,
) -> None:
    fi = ran.entry("flashinfer-python", "0.7.4")
    assert (fi["era"], fi["disk_cache"], fi["drifted"]) == ("cutedsl", True, [])
    assert fi["compile_entry"] == {
        "target": "flashinfer.gdn_kernels.delta_rule_dsl.custom_compile_cache.cached_compile",
        "state": "found",
        "flashinfer_persists_it": False,
        "jitguard": "keeps its kernels",
    }
    kernels = {k["module"]: k["route"] for k in fi["kernels"]}
    assert kernels["flashinfer.gdn_kernels.blackwell.gdn_prefill"] == "disk"
    assert kernels["flashinfer.gdn_kernels.delta_rule_dsl.delta_rule_sm90"] == "memory"
    assert fi["routes"]["disk"] == sum(1 for route in kernels.values() if route == "disk")


def test_the_markdown_says_the_same(ran: Ran) -> None:
    assert "| coverage register() logs | 6 of 6 choice sites found |" in ran.markdown
    assert "gdn_kernels.blackwell.gdn_prefill (sm100+)" in ran.markdown
    assert "## Claimed releases that lost a name jitguard uses\n\nnone" in ran.markdown


def test_a_release_with_a_renamed_site_is_reported_and_fails_the_run(
    ran: Ran, work: Path, tmp_path: Path
) -> None:
    """The real release, hard-linked, with one file replaced: the sampler's gate renamed."""
    copy = tmp_path / "vllm-renamed"
    subprocess.run(["cp", "-al", str(work / f"vllm-{VLLM}"), str(copy)], check=True)
    source = (copy / SAMPLER_FILE).read_text()
    assert "def flashinfer_sampler_supported(" in source
    (copy / SAMPLER_FILE).unlink()
    (copy / SAMPLER_FILE).write_text(source.replace("flashinfer_sampler_supported", "flashinfer_sampler_ok"))

    renamed = _run(tmp_path / "out", "--tree", str(copy), "--no-pins", "--work", str(work))
    vllm = renamed.entry("vllm", VLLM)
    assert vllm["coverage"]["summary"] == f"vLLM {VLLM}: 5 of 6 choice sites found"
    missing = f"{SAMPLER_FILE.with_suffix('').as_posix().replace('/', '.')}.flashinfer_sampler_supported"
    assert vllm["unguarded"] == f"not guarded: FlashInfer top-k/top-p sampler ({missing}: name not found)"
    assert renamed.code == 1
    assert "a claimed release lost a name jitguard uses" in renamed.stderr
    assert "**name not found**" in renamed.markdown
