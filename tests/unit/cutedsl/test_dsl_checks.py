"""The CuTeDSL era's pre-flight beyond versions: damage in the nvidia-cutlass-dsl wheels' files (from real
installed distributions: made ones, the real DSL and a copy of it damaged for real), and the cause of a GDN
prefill kernel module that fails to import (a real FlashInfer-shaped package, imported in a real subprocess
next to the real DSL)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from dsl_copies import copy_dsl, dsl_file, installed_dsl
from fake_dists import make_dist, make_installed
from finding_asserts import assert_filled, codes, only
from jitguard.cutedsl import dsl_checks, dsl_install
from jitguard.facts import Facts
from jitguard.facts.flashinfer import GDN_KERNEL_MODULES, GdnKernelModule
from jitguard.facts.import_probe import probe_import
from jitguard.findings import checks_packages
from jitguard.findings.checks import deep_checks
from jitguard.findings.model import Finding
from machine_facts import make_facts

BASE = "nvidia-cutlass-dsl-libs-base"
CU13 = "nvidia-cutlass-dsl-libs-cu13"
SHARED = "nvidia_cutlass_dsl/lib/libcute_dsl_runtime.so"
FLOOR = ">=4.6.2a0"  # flashinfer-python 0.6.18's Requires-Dist on nvidia-cutlass-dsl
SM90 = GdnKernelModule(9, *GDN_KERNEL_MODULES[9])


def with_dsl(tmp_path: Path, site: Path, dsl_site: Path | None = None) -> Facts:
    """Facts in the CuTeDSL era (flashinfer-python 0.6.18 in ``site``) whose DSL is what ``dsl_site`` holds
    (default ``site``)."""
    make_dist(site, "flashinfer-python", "0.6.18", requires=(f"nvidia-cutlass-dsl{FLOOR}",))
    return make_facts(tmp_path, dsl_install=dsl_install.probe([str(dsl_site or site)]))


def damaged_finding(tmp_path: Path, site: Path) -> list[str]:
    return codes(checks_packages.check(with_dsl(tmp_path, site), "flashinfer"))


def base_and_cu13(site: Path, *, winner: str, version: str = "4.5.2") -> None:
    """libs-base and libs-cu13 as PyPI has them at 4.5.x: both list SHARED, with different contents
    (NVIDIA/cutlass #3259); ``winner``'s copy is on disk, as when that wheel was extracted last."""
    make_installed(site, BASE, version, {SHARED: b"base runtime" * 100, "nvidia_cutlass_dsl/b.py": b"b\n"})
    make_installed(site, CU13, version, {SHARED: b"cu13 runtime" * 100, "nvidia_cutlass_dsl/c.py": b"c\n"})
    make_installed(site, "nvidia-cutlass-dsl", version, {})
    (site / SHARED).write_bytes((b"base runtime" if winner == BASE else b"cu13 runtime") * 100)


# --- cutlass-dsl-install-damaged


def test_the_cuda_wheels_copy_of_a_shared_file_is_the_normal_result_not_damage(
    tmp_path: Path, site: Path
) -> None:
    base_and_cu13(site, winner=CU13)  # what a sequential `pip install 'nvidia-cutlass-dsl[cu13]'` leaves
    assert "cutlass-dsl-install-damaged" not in damaged_finding(tmp_path, site)


def test_the_base_wheel_winning_over_cu13_is_damage_fixed_by_reinstalling_both_in_order(
    tmp_path: Path, site: Path
) -> None:
    base_and_cu13(site, winner=BASE)  # the race a parallel installer can lose
    finding = only(
        checks_packages.check(with_dsl(tmp_path, site), "flashinfer"), "cutlass-dsl-install-damaged"
    )
    assert finding.severity == "error" and finding.blocking and finding.backend == "flashinfer"
    assert finding.evidence[:2] == (
        f"{CU13} 4.5.2 at {site}: 1 of 4 files not as its RECORD lists (0 missing, 1 differ)",
        f"  {SHARED}: holds {BASE}'s copy",
    )
    assert finding.fixes[0].command == (
        f"pip install --force-reinstall --no-deps '{BASE}==4.5.2' && "
        f"pip install --force-reinstall --no-deps '{CU13}==4.5.2'"
    )  # base first, cu13 last, one at a time; the metadata-only wheel shares no path, so it is left alone
    assert "1 file of nvidia-cutlass-dsl-libs-cu13 4.5.2" in finding.title
    assert "sibling wheel's copy" in finding.cause
    assert_filled(finding)


def test_a_missing_file_is_damage_and_only_its_wheel_is_reinstalled(tmp_path: Path, site: Path) -> None:
    make_installed(site, BASE, "4.8.1", {"nvidia_cutlass_dsl/a.py": b"a\n"})
    make_installed(site, "nvidia-cutlass-dsl-libs-core", "4.8.1", {"nvidia_cutlass_dsl/cutlass/x.py": b"x\n"})
    (site / "nvidia_cutlass_dsl/cutlass/x.py").unlink()
    finding = only(
        checks_packages.check(with_dsl(tmp_path, site), "flashinfer"), "cutlass-dsl-install-damaged"
    )
    assert "  nvidia_cutlass_dsl/cutlass/x.py: missing" in finding.evidence
    assert (
        finding.fixes[0].command
        == "pip install --force-reinstall --no-deps 'nvidia-cutlass-dsl-libs-core==4.8.1'"
    )
    assert "missing" in finding.cause


def test_the_evidence_names_the_first_paths_and_counts_the_rest(tmp_path: Path, site: Path) -> None:
    files = {f"nvidia_cutlass_dsl/m{i}.py": b"good\n" for i in range(7)}
    make_installed(site, BASE, "4.8.1", files)
    for path in files:
        (site / path).write_bytes(b"bad!\n")
    finding = only(
        checks_packages.check(with_dsl(tmp_path, site), "flashinfer"), "cutlass-dsl-install-damaged"
    )
    shown = [e for e in finding.evidence if e.startswith("  nvidia_cutlass_dsl/")]
    assert len(shown) == dsl_checks.SHOWN_PATHS
    assert f"  ... and {7 - dsl_checks.SHOWN_PATHS} more" in finding.evidence
    assert finding.evidence[-1].startswith(f"checked: {BASE} 4.8.1 (9 files)")


def test_a_rewritten_script_or_metadata_file_blocks_nothing(tmp_path: Path, site: Path) -> None:
    """Files no import reaches: a bin script outside the site directory (conda rewrites their prefix) and the
    dist-info. The facts still list them; only the finding leaves them out."""
    lib = site / "lib" / "python3" / "site-packages"
    info = make_installed(
        lib, BASE, "4.8.1", {"../../../bin/run-iket": b"#!/old/python\n", "nvidia_cutlass_dsl/a.py": b"a\n"}
    )
    (site / "bin" / "run-iket").write_bytes(b"#!/new/prefix/python\n")
    (info / "INSTALLER").write_bytes(b"conda\n")
    facts = dsl_install.probe([str(lib)])
    assert {d.path for d in facts.dists[0].differ} == {"../../../bin/run-iket", f"{info.name}/INSTALLER"}
    make_dist(site, "flashinfer-python", "0.6.18", requires=(f"nvidia-cutlass-dsl{FLOOR}",))
    assert dsl_checks.install(make_facts(tmp_path, dsl_install=facts)) == []


def test_an_intact_install_and_an_unchecked_one_give_no_finding(tmp_path: Path, site: Path) -> None:
    make_installed(site, BASE, "4.8.1", {"nvidia_cutlass_dsl/a.py": b"a\n"})
    assert "cutlass-dsl-install-damaged" not in damaged_finding(tmp_path, site)
    not_checked = make_facts(tmp_path)  # dsl_install None: not the CuTeDSL era
    assert dsl_checks.install(not_checked) == []


def test_a_copy_of_the_real_dsl_with_a_corrupted_library_is_named_with_its_reinstall(
    tmp_path: Path, site: Path
) -> None:
    runtime = dsl_file("nvidia-cutlass-dsl-libs-cu13", "libcute_dsl_runtime.so")
    copy = copy_dsl(tmp_path / "env", copied=[runtime])
    with (copy / runtime).open("r+b") as f:
        f.write(b"\0" * 64)  # the ELF header gone, as a torn write leaves it
    version = next(d.version for d in installed_dsl() if (d.metadata["Name"] or "").lower() == CU13)
    make_dist(site, "flashinfer-python", "0.6.18", requires=(f"nvidia-cutlass-dsl{FLOOR}",))
    facts = make_facts(tmp_path, dsl_install=dsl_install.probe([str(copy)]))
    finding = only(checks_packages.check(facts, "flashinfer"), "cutlass-dsl-install-damaged")
    assert f"  {runtime}: matches no installed wheel's RECORD (corrupt, truncated or another version)" in (
        finding.evidence
    )
    assert finding.fixes[0].command == f"pip install --force-reinstall --no-deps '{CU13}=={version}'"
    real = make_facts(tmp_path, dsl_install=dsl_install.probe())
    assert dsl_checks.install(real) == []  # the installed original is intact


# --- the kernel module's import (doctor --deep)


def flashinfer_package(site: Path, kernel_source: str, *, gdn_prefill: str = "") -> None:
    """A package laid out as FlashInfer >= 0.6.14 lays out GDN prefill (read from the 0.6.14 and 0.7.4 wheels):
    gdn_kernels/__init__.py and delta_rule_dsl/__init__.py import the SM90 kernel module inside try/except, so
    its ImportError is swallowed, and gdn_prefill.py imports the (possibly None) kernel."""
    pkg = site / "flashinfer"
    (pkg / "gdn_kernels" / "delta_rule_dsl").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "gdn_prefill.py").write_text(
        gdn_prefill or "from .gdn_kernels import chunk_gated_delta_rule_sm90\n"
    )
    (pkg / "gdn_kernels" / "__init__.py").write_text(
        "try:\n    from .delta_rule_dsl import chunk_gated_delta_rule_sm90\n"
        "except (ImportError, RuntimeError):\n    chunk_gated_delta_rule_sm90 = None\n"
    )
    (pkg / "gdn_kernels" / "delta_rule_dsl" / "__init__.py").write_text(
        "try:\n    from .delta_rule_sm90 import delta_rule_prefill_dsl_sm90 as chunk_gated_delta_rule_sm90\n"
        "except ImportError:\n    chunk_gated_delta_rule_sm90 = None\n"
    )
    (pkg / "gdn_kernels" / "delta_rule_dsl" / "delta_rule_sm90.py").write_text(
        kernel_source + "\ndef delta_rule_prefill_dsl_sm90():\n    pass\n"
    )


def deep(tmp_path: Path, site: Path) -> list[Finding]:
    """``doctor --deep``'s FlashInfer checks, the subprocesses importing from ``site`` first; the DSL facts are
    those of the made wheels in ``tmp_path/dsl`` (kept off the import path: a directory named
    ``nvidia_cutlass_dsl`` there would become the DSL's namespace package and hide the real one)."""
    dsl_site = tmp_path / "dsl"
    dsl_site.mkdir(exist_ok=True)
    facts = with_dsl(tmp_path, site, dsl_site)
    return deep_checks(facts, "flashinfer", env={**os.environ, "PYTHONPATH": str(site)})


# A DSL API this FlashInfer would need and the installed DSL does not have: the real DSL raises the ImportError.
NEWER_DSL_API = "import cutlass\nfrom cutlass.utils.tensormap_manager import TensorMapUpdateModeV9\n"


def test_a_swallowed_kernel_import_error_from_the_dsl_is_reported_with_the_dsl_at_flashinfers_floor(
    tmp_path: Path, site: Path
) -> None:
    installed_dsl()
    flashinfer_package(site, NEWER_DSL_API)
    make_installed(tmp_path / "dsl", CU13, "4.8.1", {"nvidia_cutlass_dsl/cu13/lib/rt.so": b"rt"})  # intact
    found = deep(tmp_path, site)
    finding = only(found, "flashinfer-dsl-kernel-import-broken")
    assert "flashinfer-import-broken" not in codes(found)  # gdn_prefill imports
    assert finding.title == "FlashInfer's SM90 GDN prefill kernel fails to import: ImportError"
    assert (
        "cannot import name 'TensorMapUpdateModeV9' from 'cutlass.utils.tensormap_manager'" in finding.cause
    )
    assert "NotImplementedError('SM90 GDN prefill DSL kernel is unavailable')" in finding.cause
    assert "comes from the CUTLASS DSL" in finding.cause
    assert finding.fixes[0].command == "pip install --force-reinstall 'nvidia-cutlass-dsl[cu13]==4.6.2'"
    assert finding.fixes[1].command == f"python -c 'import {SM90.module}'"
    assert any("delta_rule_sm90.py" in e for e in finding.evidence)
    assert_filled(finding)


def test_with_the_dsl_found_damaged_the_kernel_fix_is_the_damaged_wheels_reinstall(
    tmp_path: Path, site: Path
) -> None:
    installed_dsl()
    flashinfer_package(site, NEWER_DSL_API)
    base_and_cu13(tmp_path / "dsl", winner=BASE)  # the made wheels' facts; the import uses the real DSL
    finding = only(deep(tmp_path, site), "flashinfer-dsl-kernel-import-broken")
    assert "cannot import name 'TensorMapUpdateModeV9'" in finding.cause
    assert "found its install damaged" in finding.cause
    assert (finding.fixes[0].command or "").endswith(f"'{CU13}==4.5.2'")


def test_a_kernel_import_error_in_flashinfer_itself_says_reinstall_flashinfer(
    tmp_path: Path, site: Path
) -> None:
    flashinfer_package(
        site, "from .helpers import SM90\n"
    )  # a FlashInfer file missing: a broken wheel install
    finding = only(deep(tmp_path, site), "flashinfer-dsl-kernel-import-broken")
    assert "No module named 'flashinfer.gdn_kernels.delta_rule_dsl.helpers'" in finding.cause
    assert "FlashInfer's own code" in finding.cause
    assert finding.fixes[0].command == "pip install --force-reinstall flashinfer-python==0.6.18"


def test_a_kernel_that_imports_gives_no_finding(tmp_path: Path, site: Path) -> None:
    flashinfer_package(site, "import json\n")
    assert codes(deep(tmp_path, site)) == []


def test_when_flashinfer_itself_fails_to_import_the_kernel_is_not_reported_twice(
    tmp_path: Path, site: Path
) -> None:
    installed_dsl()
    flashinfer_package(site, NEWER_DSL_API, gdn_prefill=NEWER_DSL_API)
    found = deep(tmp_path, site)
    finding = only(found, "flashinfer-import-broken")
    assert "flashinfer-dsl-kernel-import-broken" not in codes(found)
    assert finding.fixes[0].command is not None and "nvidia-cutlass-dsl" in finding.fixes[0].command
    assert "comes from the CUTLASS DSL" in finding.cause  # not "reinstall FlashInfer"


def test_the_arch_list_decides_which_kernel_module_is_imported(tmp_path: Path, site: Path) -> None:
    flashinfer_package(site, "import json\n")
    sm120 = site / "flashinfer" / "gdn_kernels" / "delta_rule_dsl" / "delta_rule_sm120.py"
    sm120.write_text("raise RuntimeError('SM120 needs the cu13 DSL build')\n")
    make_dist(site, "flashinfer-python", "0.6.18", requires=(f"nvidia-cutlass-dsl{FLOOR}",))
    facts = make_facts(tmp_path, env_extra={"FLASHINFER_CUDA_ARCH_LIST": "9.0a 12.0a"})
    found = deep_checks(facts, "flashinfer", env={**os.environ, "PYTHONPATH": str(site)})
    finding = only(found, "flashinfer-dsl-kernel-import-broken")
    assert finding.title == "FlashInfer's SM120 GDN prefill kernel fails to import: RuntimeError"
    assert "SM120 GDN prefill DSL kernel is unavailable" in finding.cause


def test_kernel_import_of_a_module_this_flashinfer_does_not_have_is_no_finding(
    tmp_path: Path, site: Path
) -> None:
    flashinfer_package(site, "import json\n")
    facts = with_dsl(tmp_path, site)
    probe = probe_import(SM90.module.replace("sm90", "sm99"), env={**os.environ, "PYTHONPATH": str(site)})
    absent = GdnKernelModule(9, "SM90", probe.module, "x")
    assert probe.error_type == "ModuleNotFoundError"
    assert dsl_checks.kernel_import(probe, absent, facts) == []


@pytest.mark.parametrize(
    ("requirement", "floor"), [(">=4.6.2a0", "4.6.2"), (">=4.8.0", "4.8.0"), (">=4.5,<5", "4.5"), ("", None)]
)
def test_flashinfers_floor(requirement: str, floor: str | None) -> None:
    assert dsl_checks._floor(requirement) == floor
