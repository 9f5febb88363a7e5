"""The symbol check before a partial GDN module is loaded, on real shared objects built with g++.

FlashInfer's own dispatch unit references every instance; linked with fewer instance objects it still links
(``-shared`` allows undefined symbols) and loads (functions bind lazily), then kills the process at the first
call of a missing instance. ``verify_library`` refuses such a library before it is loaded.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from jitguard.gdn_variants.partial_module import IncompleteModule, verify_library
from jitguard.gdn_variants.variant_plan import family_for, parse_variant, plan_for

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")

# The mangled names of two real 0.6.6 instances (nm of FlashInfer's dispatch object).
BUILT = (
    "_ZN4flat37launch_delta_rule_prefill_kernel_gbaiILb1ELb1ELb1ELb1EN7cutlass4arch4Sm90E13__nv_bfloat16S4_fEEv"
    "P11CUstream_stPT4_PT6_PKT5_SD_SD_PKS9_PKfSH_PKlPhiiiiiilfi"
)
MISSING = BUILT.replace("ILb1ELb1ELb1ELb1E", "ILb0ELb1ELb1ELb0E")


def _library(tmp_path: Path, *, reference_missing: bool) -> Path:
    """A library that defines BUILT and, optionally, calls MISSING without defining it."""
    source = tmp_path / "module.cpp"
    lines = [f'extern "C" void built() __asm__("{BUILT}");', 'extern "C" void built() {}']
    if reference_missing:
        lines += [f'extern "C" void missing() __asm__("{MISSING}");', 'extern "C" void call() { missing(); }']
    source.write_text("\n".join(lines) + "\n")
    so = tmp_path / "module.so"
    subprocess.run(["g++", "-shared", "-fPIC", str(source), "-o", str(so)], check=True, capture_output=True)
    return so


def _plan():  # type: ignore[no-untyped-def]
    family = family_for("0.6.6")
    assert family is not None
    return plan_for("0.6.6", [parse_variant("bf16_g1b1a1i1", family)])


def test_a_library_holding_every_instance_it_calls_passes(tmp_path: Path) -> None:
    verify_library(_library(tmp_path, reference_missing=False), _plan())


def test_a_library_that_calls_an_instance_it_lacks_is_refused_before_any_load(tmp_path: Path) -> None:
    with pytest.raises(IncompleteModule, match="references 1 GDN prefill instance") as raised:
        verify_library(_library(tmp_path, reference_missing=True), _plan())
    assert "ILb0ELb1ELb1ELb0E" in str(raised.value)


def test_the_full_module_is_not_checked(tmp_path: Path) -> None:
    verify_library(_library(tmp_path, reference_missing=True), plan_for("0.6.6"))
