"""FlashInfer's own CuTeDSL disk cache (``flashinfer.jit.cute_dsl_core``, >= 0.6.18) beside jitguard's kernel cache,
on the real flashinfer-python 0.7.4 with the real DSL, on this GPU-less machine: a kernel is compiled once and
kept once, never by both.

Each process compiles a real CuTeDSL kernel for sm_90a (a host function that launches nothing, so no GPU is
needed) the way FlashInfer's kernel modules do, and counts the DSL's compiles by wrapping ``cute.compile``:
- through ``build_and_load_cute_dsl_kernel`` (FlashInfer's disk cache, which Blackwell GDN prefill and the GDN
  decode kernels use since 0.7): jitguard's nvcc build hook stands aside; FlashInfer compiles once and keeps
  the one copy; jitguard keeps none and says nothing;
- through ``custom_compile_cache.cached_compile`` (FlashInfer keeps it in memory only: SM90/SM120 GDN prefill):
  jitguard persists it, as before;
- through a ``cached_compile`` made persistent by FlashInfer (the release's own file with its compile routed
  into ``build_and_load_cute_dsl_kernel``, as a later FlashInfer may do): jitguard defers to FlashInfer.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from flashinfer_releases import TINY_KERNEL, prepared, release_env
from jitguard.cutedsl.compile_routes import DISK, MEMORY, has_disk_cache, persists_itself, routes

SRC = Path(__file__).resolve().parents[2] / "src"
VERSION = "0.7.4"
CACHE_FILE = Path("flashinfer/gdn_kernels/delta_rule_dsl/custom_compile_cache.py")

SCRIPT = (
    r"""
import json, logging, sys, types
logging.basicConfig(level=logging.INFO, stream=sys.stderr)  # before install(): what the import hook says
import torch
torch.cuda.get_device_properties = lambda *a, **k: types.SimpleNamespace(multi_processor_count=132)
torch.cuda.get_device_capability = lambda *a, **k: (9, 0)
import jitguard
jitguard.install()
import cutlass, cutlass.cute as cute
from cutlass.cute.runtime import from_dlpack

class Counting:
    # cute.compile, counted: FlashInfer's modules call it as `cute.compile[options](...)` at call time.
    def __init__(self, inner):
        self.inner, self.count = inner, 0
    def __getitem__(self, options):
        compile = self.inner[options]
        def run(*args, **kwargs):
            self.count += 1
            return compile(*args, **kwargs)
        return run
    def __call__(self, *args, **kwargs):
        self.count += 1
        return self.inner(*args, **kwargs)

cute.compile = COMPILES = Counting(cute.compile)
from flashinfer.jit import env as jit_env
from flashinfer.jit.cute_dsl_core import build_and_load_cute_dsl_kernel
from flashinfer.gdn_kernels.delta_rule_dsl import custom_compile_cache as ccc
from jitguard.cutedsl.persisting_compile import is_routed

"""
    + TINY_KERNEL
    + r"""

a = from_dlpack(torch.zeros(32)).mark_layout_dynamic()
arch = (cute.GPUArch("sm_90a"),)
route = sys.argv[1]
if route == "disk":
    kernel = build_and_load_cute_dsl_kernel(
        "jitguard_probe", "tiny", lambda: cute.compile[arch](Tiny(True), a, cutlass.Int32(3)),
        extra_key_files=(__file__,), enable_tvm_ffi=False,
    )
else:
    kernel = ccc.cached_compile(Tiny(True), a, cutlass.Int32(3), compile_options=arch)
kernel(a, cutlass.Int32(5))
print("RESULT " + json.dumps({
    "compiles": COMPILES.count,
    "routed": is_routed(ccc),
    "flashinfer_objects": sorted(p.name for p in jit_env.FLASHINFER_JIT_DIR.rglob("*.o")),
}))
"""
)

# What a FlashInfer whose memory-only compile cache became persistent would run instead of its bare compile.
PERSISTENT_COMPILE = """compiled_fn = __import__("flashinfer.jit.cute_dsl_core", fromlist=["x"]).build_and_load_cute_dsl_kernel(
                "gdn_prefill_dsl",
                "k" + __import__("hashlib").sha256(repr(cache_key).encode()).hexdigest()[:16],
                lambda: cute.compile[compile_options](func, *args, **kwargs),
                extra_key_files=(__import__("inspect").getsourcefile(type(func)),),
                enable_tvm_ffi=False,
            )"""
BARE_COMPILE = "compiled_fn = cute.compile[compile_options](func, *args, **kwargs)"


@pytest.fixture(scope="module")
def target() -> Path:
    return prepared(VERSION)


@pytest.fixture(scope="module")
def persistent_release(target: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The release with one file changed: its compile cache routes its compile into FlashInfer's disk cache.
    The rest is hard links to the real release (nothing copied)."""
    copy = tmp_path_factory.mktemp("flashinfer-persistent") / "site"
    subprocess.run(["cp", "-al", str(target), str(copy)], check=True)
    source = (target / CACHE_FILE).read_text()
    assert source.count(BARE_COMPILE) == 2, "this release's compile cache is not the one this test edits"
    (copy / CACHE_FILE).unlink()
    (copy / CACHE_FILE).write_text(source.replace(BARE_COMPILE, PERSISTENT_COMPILE, 1))
    return copy


def _run(route: str, site: Path, workdir: Path) -> tuple[dict[str, Any], str]:
    env = release_env(workdir, site, SRC)
    env["CUTE_DSL_ARCH"] = "sm_90a"  # FlashInfer's disk cache names its directory after the arch
    script = workdir / "probe.py"  # the DSL compiles from source files only
    script.write_text(SCRIPT)
    proc = subprocess.run(
        [sys.executable, str(script), route],
        env=env,
        cwd=workdir,
        capture_output=True,
        text=True,
        timeout=300,
        stdin=subprocess.DEVNULL,
    )
    results = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    assert proc.returncode == 0 and results, f"exit {proc.returncode}:\n{(proc.stdout + proc.stderr)[-6000:]}"
    return json.loads(results[-1][len("RESULT ") :]), proc.stderr


def _jitguard_objects(workdir: Path) -> list[Path]:
    return sorted((workdir / "jitguard-cache").rglob("*.o"))


def test_the_release_has_a_disk_cache_and_routes_gdn_kernels_both_ways(target: Path) -> None:
    package = target / "flashinfer"
    found = {r.module: r.route for r in routes(package)}
    assert has_disk_cache(package)
    assert found["flashinfer.gdn_kernels.blackwell.gdn_prefill"] == DISK
    assert found["flashinfer.gdn_kernels.gdn_decode_pretranspose"] == DISK
    assert found["flashinfer.gdn_kernels.delta_rule_dsl.delta_rule_sm90"] == MEMORY
    assert found["flashinfer.gdn_kernels.delta_rule_dsl.delta_rule_sm120"] == MEMORY
    assert not persists_itself(target / CACHE_FILE)


def test_a_kernel_flashinfer_keeps_on_disk_is_compiled_once_and_kept_once(
    target: Path, tmp_path: Path
) -> None:
    cold, cold_err = _run("disk", target, tmp_path)
    assert cold["compiles"] == 1
    assert cold["flashinfer_objects"] == ["tiny.o"]
    assert _jitguard_objects(tmp_path) == []  # no second copy
    assert "jitguard-fault" not in cold_err and "CuTeDSL kernel" not in cold_err.replace("CuTe-DSL", "")

    warm, warm_err = _run("disk", target, tmp_path)
    assert warm["compiles"] == 0  # FlashInfer loaded its own copy
    assert _jitguard_objects(tmp_path) == []
    assert "jitguard-fault" not in warm_err


def test_a_kernel_flashinfer_keeps_in_memory_only_is_kept_by_jitguard(target: Path, tmp_path: Path) -> None:
    cold, cold_err = _run("memory", target, tmp_path)
    assert (cold["routed"], cold["compiles"], cold["flashinfer_objects"]) == (True, 1, [])
    assert len(_jitguard_objects(tmp_path)) == 1, cold_err[-4000:]
    warm, _ = _run("memory", target, tmp_path)
    assert warm["compiles"] == 0


def test_a_compile_cache_flashinfer_made_persistent_is_left_to_flashinfer(
    persistent_release: Path, tmp_path: Path
) -> None:
    assert persists_itself(persistent_release / CACHE_FILE)
    cold, cold_err = _run("memory", persistent_release, tmp_path)
    assert cold["routed"] is False
    assert cold["compiles"] == 1 and len(cold["flashinfer_objects"]) == 1
    assert _jitguard_objects(tmp_path) == []
    assert "jitguard-fault" not in cold_err
    assert "keeps these CuTeDSL kernels on disk itself" in cold_err, cold_err[-4000:]

    warm, _ = _run("memory", persistent_release, tmp_path)
    assert warm["compiles"] == 0 and _jitguard_objects(tmp_path) == []


def test_the_hard_linked_release_is_the_real_one_but_for_the_edited_file(
    target: Path, persistent_release: Path
) -> None:
    """The edit is the only difference, and the real release is unchanged (hard links share inodes)."""
    assert BARE_COMPILE in (target / CACHE_FILE).read_text()
    same = target / "flashinfer" / "jit" / "cute_dsl_core.py"
    assert os.path.samefile(same, persistent_release / "flashinfer" / "jit" / "cute_dsl_core.py")
    assert not os.path.samefile(target / CACHE_FILE, persistent_release / CACHE_FILE)
