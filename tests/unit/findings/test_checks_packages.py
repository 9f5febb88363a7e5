"""Package checks per backend, on this machine's real packages and on real fake distributions (dist-info and
package directories in a temporary site directory) for the versions this machine does not have."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from fake_dists import make_dist
from finding_asserts import assert_filled, codes, only
from jitguard.facts import flashinfer, import_probe, packages
from jitguard.facts.gpu import GpuFacts
from jitguard.facts.packages import PackageFacts, PackageInfo
from jitguard.findings import checks_packages
from machine_facts import make_facts

FI_VERSION = packages.probe().version("flashinfer-python")
needs_flashinfer = pytest.mark.skipif(FI_VERSION is None, reason="flashinfer-python is not installed")


def with_packages(**versions: str | None) -> PackageFacts:
    """This machine's packages with some versions replaced (None removes one)."""
    real = packages.probe()
    installed = [p for p in real.installed if p.name not in versions]
    installed += [PackageInfo(n, v, "/site") for n, v in versions.items() if v is not None]
    missing = tuple(n for n in packages.PACKAGES if n not in {p.name for p in installed})
    return PackageFacts(tuple(installed), missing)


def make_jit_cache(site: Path, version: str) -> Path:
    make_dist(site, "flashinfer-jit-cache", version)
    pkg = site / "flashinfer_jit_cache"
    so = pkg / "jit_cache" / "gdn_prefill_sm90" / "gdn_prefill_sm90.so"
    so.parent.mkdir(parents=True)
    so.write_bytes(b"\x7fELF")
    (pkg / "_build_meta.py").write_text(f'__version__ = "{version}"\n')
    (pkg / "__init__.py").write_text("from ._build_meta import __version__\n")
    return so


# --- this machine


def test_this_machine(tmp_path: Path) -> None:
    facts = make_facts(tmp_path)
    fi_codes = codes(checks_packages.check(facts, "flashinfer"))
    assert "flashinfer-missing" not in fi_codes or FI_VERSION is None
    assert ("torch-no-cuda" in fi_codes) == (facts.packages.torch_flavour in ("cpu", "rocm"))
    triton_codes = codes(checks_packages.check(facts, "triton"))
    assert ("triton-missing" in triton_codes) == (facts.packages.get("triton") is None)
    assert ("fla-missing" in triton_codes) == (facts.packages.get("fla-core") is None)
    expected = [] if facts.packages.get("torch") else ["torch-missing"]
    assert codes(checks_packages.check(facts, "torch")) == expected


def test_cpu_torch_blocks_the_gpu_backends(tmp_path: Path) -> None:
    facts = make_facts(tmp_path, packages=with_packages(torch="2.13.0+cpu"))
    for backend in ("flashinfer", "triton"):
        finding = only(checks_packages.check(facts, backend), "torch-no-cuda")
        assert finding.title == "PyTorch 2.13.0+cpu is a CPU-only build"
        assert_filled(finding)
    assert checks_packages.check(facts, "torch") == []
    rocm = make_facts(tmp_path, packages=with_packages(torch="2.8.0+rocm6.3"))
    assert "torch-no-cuda" in codes(checks_packages.check(rocm, "flashinfer"))
    assert "torch-no-cuda" not in codes(checks_packages.check(rocm, "triton"))  # FLA runs on ROCm


def test_missing_torch_blocks_every_backend(tmp_path: Path) -> None:
    facts = make_facts(tmp_path, packages=with_packages(torch=None))
    for backend in ("flashinfer", "triton", "torch"):
        assert "torch-missing" in codes(checks_packages.check(facts, backend))


# --- flashinfer


def test_flashinfer_missing_says_only_that(tmp_path: Path) -> None:
    facts = make_facts(
        tmp_path, packages=with_packages(**{"flashinfer-python": None, "torch": "2.11.0+cu130"})
    )
    found = checks_packages.check(facts, "flashinfer")
    assert codes(found) == ["flashinfer-missing"]
    assert found[0].fixes[0].command == "pip install flashinfer-python"


def test_flashinfer_too_old(tmp_path: Path, site: Path) -> None:
    make_dist(site, "flashinfer-python", "0.5.3")
    facts = make_facts(tmp_path)
    finding = only(checks_packages.check(facts, "flashinfer"), "flashinfer-too-old")
    assert "0.5.3" in finding.title
    assert_filled(finding)


@needs_flashinfer
def test_mismatching_jit_cache_blocks_import(tmp_path: Path, site: Path) -> None:
    make_jit_cache(site, "0.6.5+cu129")
    facts = make_facts(tmp_path, packages=None)
    finding = only(checks_packages.check(facts, "flashinfer"), "jit-cache-mismatch")
    assert finding.severity == "error"
    assert finding.title == f"flashinfer-jit-cache 0.6.5+cu129 does not match flashinfer-python {FI_VERSION}"
    assert "raises RuntimeError" in finding.cause
    command = finding.fixes[0].command or ""
    prefix = f"pip install flashinfer-jit-cache=={FI_VERSION} --index-url https://flashinfer.ai/whl/"
    assert command.startswith(prefix) and command[len(prefix) :] in checks_packages.JIT_CACHE_TAGS
    assert finding.fixes[2].command == "export FLASHINFER_DISABLE_VERSION_CHECK=1"
    assert_filled(finding)


@needs_flashinfer
def test_disabled_check_turns_the_mismatch_into_a_warning(tmp_path: Path, site: Path) -> None:
    make_jit_cache(site, "0.6.5+cu129")
    facts = make_facts(tmp_path, {"FLASHINFER_DISABLE_VERSION_CHECK": "1"})
    finding = only(checks_packages.check(facts, "flashinfer"), "jit-cache-mismatch")
    assert finding.severity == "warning"
    assert "FLASHINFER_DISABLE_VERSION_CHECK is set" in finding.cause


def test_mismatching_cubin_blocks_import(tmp_path: Path, site: Path) -> None:
    make_dist(site, "flashinfer-python", "0.6.6")
    make_dist(site, "flashinfer-cubin", "0.6.5")
    facts = make_facts(tmp_path)
    finding = only(checks_packages.check(facts, "flashinfer"), "jit-cache-mismatch")
    assert finding.title == "flashinfer-cubin 0.6.5 does not match flashinfer-python 0.6.6"
    assert finding.fixes[0].command == "pip install flashinfer-cubin==0.6.6"


@needs_flashinfer
def test_matching_jit_cache_means_no_compile(tmp_path: Path, site: Path) -> None:
    if flashinfer.era_of(FI_VERSION)[0] != "nvcc":
        pytest.skip("the installed FlashInfer is not in the nvcc era")
    so = make_jit_cache(site, f"{FI_VERSION}+cu129")
    facts = make_facts(tmp_path)
    found = checks_packages.check(facts, "flashinfer")
    assert "jit-cache-mismatch" not in codes(found)
    finding = only(found, "gdn-prebuilt-available")
    assert finding.severity == "info"
    assert str(so) in finding.cause and "34 translation units" in finding.cause
    assert_filled(finding)


def test_cutedsl_era_needs_the_dsl_at_flashinfers_floor(tmp_path: Path, site: Path) -> None:
    make_dist(site, "flashinfer-python", "0.7.4", requires=("nvidia-cutlass-dsl>=4.8.0",))
    make_dist(site, "nvidia-cutlass-dsl", "4.3.4")
    facts = make_facts(tmp_path)
    found = checks_packages.check(facts, "flashinfer")
    too_old = only(found, "cutlass-dsl-too-old")
    assert (
        too_old.title == "nvidia-cutlass-dsl 4.3.4 is older than flashinfer-python 0.7.4 requires (>=4.8.0)"
    )
    assert too_old.fixes[0].command == "pip install -U 'nvidia-cutlass-dsl>=4.8.0'"
    info = only(found, "flashinfer-cutedsl-compiles-per-process")
    assert info.severity == "info"
    assert "gdn-prebuilt-available" not in codes(found)
    for f in found:
        assert_filled(f)


def test_cutedsl_era_without_the_dsl(tmp_path: Path, site: Path) -> None:
    make_dist(site, "flashinfer-python", "0.6.18", requires=("nvidia-cutlass-dsl>=4.4.0",))
    facts = make_facts(tmp_path, packages=with_packages(**{"nvidia-cutlass-dsl": None}))
    finding = only(checks_packages.check(facts, "flashinfer"), "cutlass-dsl-missing")
    assert finding.fixes[0].command == "pip install 'nvidia-cutlass-dsl>=4.4.0'"
    assert_filled(finding)


def test_import_probe_failure_becomes_a_finding(tmp_path: Path) -> None:
    mods = tmp_path / "mods"
    mods.mkdir()
    (mods / "jg_broken_kernel.py").write_text(
        "raise ImportError('libcute_dsl_native.so: cannot open shared object')\n"
    )
    probe = import_probe.probe_import("jg_broken_kernel", env={**os.environ, "PYTHONPATH": str(mods)})
    found = checks_packages.import_findings(probe, version="0.6.18")
    finding = only(found, "flashinfer-import-broken")
    assert finding.title == "Importing jg_broken_kernel fails: ImportError"
    assert "libcute_dsl_native.so" in finding.cause
    assert any("jg_broken_kernel.py" in e for e in finding.evidence)
    assert finding.fixes[1].command == "pip install --force-reinstall flashinfer-python==0.6.18"
    assert_filled(finding)
    assert checks_packages.import_findings(import_probe.probe_import("json")) == []


# --- triton


def test_triton_backend_needs_fla_and_triton(tmp_path: Path) -> None:
    facts = make_facts(
        tmp_path, packages=with_packages(torch="2.11.0+cu130", triton=None, **{"fla-core": "0.5.0"})
    )
    found = checks_packages.check(facts, "triton")
    assert codes(found) == ["fla-too-old", "triton-missing"]
    assert only(found, "fla-too-old").title == "fla-core 0.5.0 is older than 0.6.0"
    ok = make_facts(
        tmp_path, packages=with_packages(torch="2.11.0+cu130", triton="3.6.0", **{"fla-core": "0.6.0"})
    )
    assert checks_packages.check(ok, "triton") == []
    none = make_facts(
        tmp_path, packages=with_packages(torch="2.11.0+cu130", triton="3.6.0", **{"fla-core": None})
    )
    assert codes(checks_packages.check(none, "triton")) == ["fla-missing"]


# --- the jit-cache index


@pytest.mark.parametrize(
    ("torch", "driver", "tag"),
    [
        ("2.9.0+cu128", "13.0", "cu128"),
        ("2.11.0+cu130", None, "cu130"),
        ("2.13.0+cpu", "12.9", "cu129"),
        ("2.13.0+cpu", "13.1", "cu130"),
        ("2.13.0+cpu", None, "cu129"),
        ("2.7.0+cu126", "12.8", "cu128"),
    ],
)
def test_cuda_tag(tmp_path: Path, torch: str, driver: str | None, tag: str) -> None:
    facts = make_facts(
        tmp_path, packages=with_packages(torch=torch), gpu=GpuFacts((), "x", driver, None, "none")
    )
    assert checks_packages.cuda_tag(facts) == tag


def test_an_import_failing_on_a_cpu_only_torch_says_so_instead_of_blaming_the_install() -> None:
    from jitguard.facts.import_probe import ImportProbe
    from jitguard.findings.checks_packages import import_findings

    probe = ImportProbe(
        "flashinfer.gdn_prefill", False, "AssertionError", "Torch not compiled with CUDA enabled", None, 1.0
    )
    (finding,) = import_findings(probe, version="0.6.18")
    assert "CPU-only build" in finding.cause and "torch-no-cuda" in finding.cause
