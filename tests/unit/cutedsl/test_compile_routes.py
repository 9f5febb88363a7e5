"""Which route a FlashInfer module's CuTeDSL kernels take, read from small sources written the way FlashInfer's
modules are (the real releases are read in tests/real/test_flashinfer_cutedsl_disk_cache.py)."""

from __future__ import annotations

import ast
from pathlib import Path

from jitguard.cutedsl.compile_routes import (
    BARE,
    DISK,
    MEMORY,
    archs_of,
    has_disk_cache,
    persists_itself,
    route_of,
    routes,
)

DISK_SOURCE = """
from ..jit.cute_dsl_core import build_and_load_cute_dsl_kernel
def run():
    return build_and_load_cute_dsl_kernel("m", "k", lambda: cute.compile[opts](kernel, a))
"""
MEMORY_SOURCE = """
from .custom_compile_cache import cached_compile
def run():
    return cached_compile(kernel, a, compile_options=opts)
"""
BARE_SOURCE = """
import cutlass.cute as cute
_cache = {}
def run():
    _cache["k"] = cute.compile(kernel, a)
"""
LOOKALIKE_SOURCE = """
import re
def cached_compile(x):  # its own function of that name, not FlashInfer's compile cache
    return re.compile(x)
def run():
    return cached_compile("a")
"""


def test_each_route_is_told_by_what_the_module_calls() -> None:
    assert route_of(ast.parse(DISK_SOURCE)) == DISK  # the cute.compile inside is FlashInfer's disk cache's
    assert route_of(ast.parse(MEMORY_SOURCE)) == MEMORY
    assert route_of(ast.parse(BARE_SOURCE)) == BARE


def test_a_module_with_a_lookalike_name_compiles_no_cutedsl_kernel() -> None:
    assert route_of(ast.parse(LOOKALIKE_SOURCE)) is None


def test_archs_come_from_the_module_name() -> None:
    assert archs_of("flashinfer.gdn_kernels.delta_rule_dsl.delta_rule_cp_sm90") == ("sm90",)
    assert archs_of("flashinfer.gdn_kernels.blackwell.gdn_prefill") == ("sm100+",)
    assert archs_of("flashinfer.gdn_kernels.gdn_decode_pretranspose") == ()


def _package(tmp_path: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = tmp_path / "flashinfer" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return tmp_path / "flashinfer"


def test_routes_walks_the_package_and_skips_the_caches_and_vendored_code(tmp_path: Path) -> None:
    package = _package(
        tmp_path,
        {
            "gdn_kernels/blackwell/gdn_prefill.py": DISK_SOURCE,
            "gdn_kernels/delta_rule_dsl/delta_rule_sm90.py": MEMORY_SOURCE,
            "gdn_kernels/delta_rule_dsl/custom_compile_cache.py": BARE_SOURCE,  # the cache itself
            "data/cccl/python/jit.py": BARE_SOURCE,  # vendored
            "topk.py": BARE_SOURCE,
            "plain.py": "x = 1\n",
            "broken.py": "def (:\n",
        },
    )
    found = {r.module: (r.route, r.archs) for r in routes(package)}
    assert found == {
        "flashinfer.gdn_kernels.blackwell.gdn_prefill": (DISK, ("sm100+",)),
        "flashinfer.gdn_kernels.delta_rule_dsl.delta_rule_sm90": (MEMORY, ("sm90",)),
        "flashinfer.topk": (BARE, ()),
    }


def test_a_compile_cache_that_calls_flashinfers_disk_cache_persists_itself(tmp_path: Path) -> None:
    package = _package(tmp_path, {"memory.py": MEMORY_SOURCE, "disk.py": DISK_SOURCE})
    assert persists_itself(package / "disk.py")
    assert not persists_itself(package / "memory.py")
    assert not persists_itself(package / "missing.py")


def test_the_disk_cache_is_the_jitspeccutedsl_class(tmp_path: Path) -> None:
    package = _package(tmp_path, {"jit/cute_dsl_core.py": "class JitSpecCuteDsl(JitSpec):\n    pass\n"})
    assert has_disk_cache(package)
    assert not has_disk_cache(_package(tmp_path / "old", {"jit/core.py": "class JitSpec: pass\n"}))
