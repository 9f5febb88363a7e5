"""`import jitguard` (and its CLI's --help) stay light: no torch, flashinfer, triton, fla or vllm."""

from __future__ import annotations

import subprocess
import sys

HEAVY = ("torch", "flashinfer", "triton", "fla", "vllm", "tvm_ffi")


def _loaded_after(code: str) -> list[str]:
    probe = f"{code}\nimport sys\nprint(' '.join(m for m in {HEAVY!r} if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    return out.stdout.split()


def test_import_jitguard_loads_no_heavy_package() -> None:
    assert _loaded_after("import jitguard") == []


def test_install_is_lazy_and_imports_no_heavy_package() -> None:
    assert _loaded_after("import jitguard; jitguard.install()") == []


def test_building_the_cli_parser_imports_no_heavy_package() -> None:
    assert _loaded_after("from jitguard.cli import build_parser; build_parser()") == []


def test_facts_collection_imports_no_heavy_package() -> None:
    assert _loaded_after("from jitguard.facts import collect; collect()") == []
