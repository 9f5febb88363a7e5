"""FlashInfer facts against the real installed flashinfer-python (0.6.6 here), cross-checked with what
FlashInfer itself computes when imported, and against real fake distributions (dist-info + package dirs) in a
temporary site directory for other versions and a mismatching flashinfer-jit-cache."""

from __future__ import annotations

import importlib
import importlib.metadata
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fake_dists import make_dist
from jitguard.facts import flashinfer, packages
from jitguard.facts.import_probe import probe_import


def installed_flashinfer() -> str:
    try:
        return importlib.metadata.version("flashinfer-python")
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("flashinfer-python is not installed")


def fi_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLASHINFER_")}
    env.update(
        {"FLASHINFER_CUDA_ARCH_LIST": "9.0a", "FLASHINFER_WORKSPACE_BASE": str(tmp_path / "ws"), **extra}
    )
    return env


def make_jit_cache(site: Path, version: str, *, with_gdn: bool = True) -> Path:
    """A flashinfer-jit-cache laid out as the real wheel: version in _build_meta.py, modules in jit_cache/."""
    make_dist(site, "flashinfer-jit-cache", version)
    pkg = site / "flashinfer_jit_cache"
    (pkg / "jit_cache").mkdir(parents=True)
    (pkg / "_build_meta.py").write_text(f'__version__ = "{version}"\n')
    (pkg / "__init__.py").write_text(
        "from pathlib import Path\nfrom ._build_meta import __version__\n\n"
        "def get_jit_cache_dir():\n    return str(Path(__file__).parent / 'jit_cache')\n"
    )
    so = pkg / "jit_cache" / "gdn_prefill_sm90" / "gdn_prefill_sm90.so"
    if with_gdn:
        so.parent.mkdir(parents=True)
        so.write_bytes(b"\x7fELF")
    return so


# --- eras


@pytest.mark.parametrize(
    ("version", "era", "module", "tus"),
    [
        (None, "none", None, None),
        ("0.5.3", "too-old", None, None),
        ("0.6.1", "too-old", None, None),
        ("0.6.2", "nvcc", "gdn_prefill_launcher", 2),
        ("0.6.3", "nvcc", "gdn_prefill_sm90", 34),
        ("0.6.6", "nvcc", "gdn_prefill_sm90", 34),
        ("0.6.7", "nvcc", "gdn_prefill_sm90", 34),
        ("0.6.8", "nvcc", "gdn_prefill_sm90", 66),
        ("0.6.13", "nvcc", "gdn_prefill_sm90", 66),
        ("0.6.14", "cutedsl", None, None),
        ("0.6.18.post1", "cutedsl", None, None),
        ("0.7.4", "cutedsl", None, None),
        ("not-a-version", "too-old", None, None),
    ],
)
def test_era_table(version: str | None, era: str, module: str | None, tus: int | None) -> None:
    assert flashinfer.era_of(version) == (era, module, tus)


# --- the real installed FlashInfer


def test_real_installed_flashinfer(tmp_path: Path) -> None:
    version = installed_flashinfer()
    facts = flashinfer.probe(packages.probe(), fi_env(tmp_path))
    assert facts.installed and facts.version == version
    assert facts.package_dir is not None and Path(facts.package_dir, "jit").is_dir()
    assert facts.workspace_dir == tmp_path / "ws" / ".cache" / "flashinfer" / version / "90a"
    assert facts.jit_dir == facts.workspace_dir / "cached_ops"
    assert facts.arch_list == ("9.0a",) and facts.arch_source == "FLASHINFER_CUDA_ARCH_LIST"
    if version == "0.6.6":
        assert (facts.era, facts.gdn_module, facts.gdn_tu_count) == ("nvcc", "gdn_prefill_sm90", 34)
        assert facts.cutlass_dsl_requirement == ">=4.3.4"
        assert facts.gdn_supports(9, 0) and not facts.gdn_supports(10, 0) and not facts.gdn_supports(8, 9)
    assert facts.prebuilt_gdn is None  # nothing built in a fresh workspace
    assert not facts.workspace_dir.exists()  # probing creates nothing


def test_paths_agree_with_flashinfer_itself(tmp_path: Path) -> None:
    """Import FlashInfer's own env module (in a subprocess) and compare its directories with ours."""
    installed_flashinfer()
    env = fi_env(tmp_path, FLASHINFER_CUDA_ARCH_LIST="10.0a 9.0a")
    script = (
        "import flashinfer.jit.env as e; "
        "print(e.FLASHINFER_WORKSPACE_DIR); print(e.FLASHINFER_JIT_DIR); print(e.FLASHINFER_GEN_SRC_DIR)"
    )
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    theirs = out.stdout.split()[-3:]
    ours = flashinfer.probe(packages.probe(), env)
    assert ours.arch_dir == "90a_100a"
    assert theirs == [str(ours.workspace_dir), str(ours.jit_dir), str(ours.generated_dir)]


def test_arch_argument_is_used_when_the_env_var_is_unset(tmp_path: Path) -> None:
    env = {"HOME": str(tmp_path)}
    facts = flashinfer.probe(packages.probe(), env, arch=flashinfer.arch_from_capability(9, 0))
    assert facts.arch_list == ("9.0a",)
    assert facts.arch_source == "argument"
    assert facts.workspace_base == tmp_path
    unknown = flashinfer.probe(packages.probe(), env)
    assert unknown.arch_dir is None and unknown.jit_dir is None and unknown.arch_source is None


def test_arch_spelling() -> None:
    assert flashinfer.arch_from_capability(9, 0) == "9.0a"
    assert flashinfer.arch_from_capability(12, 0) == "12.0a"
    assert flashinfer.arch_from_capability(8, 6) == "8.6"


@pytest.mark.parametrize("value", ["9.0a,10.0a", "9.0a ", " 9.0a", "sm90", "", "a.0"])
def test_arch_lists_flashinfer_rejects_at_import(tmp_path: Path, value: str) -> None:
    facts = flashinfer.probe(packages.probe(), {"HOME": str(tmp_path), "FLASHINFER_CUDA_ARCH_LIST": value})
    assert facts.arch_list_error is not None and repr(value) in facts.arch_list_error
    assert facts.arch_dir is None


def test_existing_cached_ops_module_counts_as_prebuilt(tmp_path: Path) -> None:
    version = installed_flashinfer()
    if flashinfer.era_of(version)[0] != "nvcc":
        pytest.skip("the installed FlashInfer is not in the nvcc era")
    env = fi_env(tmp_path)
    module = flashinfer.era_of(version)[1]
    so = (
        tmp_path
        / "ws"
        / ".cache"
        / "flashinfer"
        / version
        / "90a"
        / "cached_ops"
        / f"{module}"
        / f"{module}.so"
    )
    so.parent.mkdir(parents=True)
    so.write_bytes(b"\x7fELF")
    facts = flashinfer.probe(packages.probe(), env)
    assert (facts.prebuilt_gdn, facts.prebuilt_source) == (so, "cached_ops")


# --- flashinfer-jit-cache


def test_mismatching_jit_cache_is_detected_and_import_really_raises(tmp_path: Path, site: Path) -> None:
    version = installed_flashinfer()
    make_jit_cache(site, "0.6.5+cu129")
    env = fi_env(tmp_path, PYTHONPATH=str(site))
    facts = flashinfer.probe(packages.probe(), env)
    assert facts.jit_cache_version == "0.6.5+cu129"
    assert facts.jit_cache_dir == site / "flashinfer_jit_cache" / "jit_cache"
    assert facts.jit_cache_matches is False
    assert facts.jit_cache_import_raises is True

    probe = probe_import("flashinfer", env=env, timeout=180)
    assert not probe.ok
    assert probe.error_type == "RuntimeError"
    assert "does not match" in (probe.error_message or "") and version in (probe.error_message or "")


def test_disabled_version_check_lets_import_through(tmp_path: Path, site: Path) -> None:
    installed_flashinfer()
    make_jit_cache(site, "0.6.5+cu129")
    env = fi_env(tmp_path, PYTHONPATH=str(site), FLASHINFER_DISABLE_VERSION_CHECK="1")
    facts = flashinfer.probe(packages.probe(), env)
    assert facts.version_check_disabled and not facts.jit_cache_import_raises
    assert facts.jit_cache_matches is False
    probe = probe_import("flashinfer", env=env, timeout=180)
    assert probe.ok, probe.traceback_tail


def test_any_non_empty_disable_value_disables_the_check(tmp_path: Path) -> None:
    # FlashInfer tests `not os.getenv(...)`: even "0" disables it.
    facts = flashinfer.probe(
        packages.probe(), {"HOME": str(tmp_path), "FLASHINFER_DISABLE_VERSION_CHECK": "0"}
    )
    assert facts.version_check_disabled


def test_matching_jit_cache_provides_the_prebuilt_gdn_module(tmp_path: Path, site: Path) -> None:
    version = installed_flashinfer()
    if flashinfer.era_of(version)[0] != "nvcc":
        pytest.skip("the installed FlashInfer is not in the nvcc era")
    so = make_jit_cache(site, f"{version}+cu129")
    facts = flashinfer.probe(packages.probe(), fi_env(tmp_path))
    assert facts.jit_cache_matches is True and not facts.jit_cache_import_raises
    assert (facts.prebuilt_gdn, facts.prebuilt_source) == (so, "flashinfer-jit-cache")


def test_prefix_comparison_quirk_is_seen_as_a_silent_mismatch(tmp_path: Path, site: Path) -> None:
    make_dist(site, "flashinfer-python", "0.6.1")
    make_jit_cache(site, "0.6.10+cu129")
    facts = flashinfer.probe(packages.probe(), {"HOME": str(tmp_path)})
    assert facts.version == "0.6.1"
    assert facts.jit_cache_matches is False
    assert facts.jit_cache_import_raises is False  # "0.6.10+cu129".startswith("0.6.1")


# --- the CuTeDSL era (a fake flashinfer-python dist shadows the real one)


def test_cutedsl_era_reads_flashinfers_own_dsl_floor(tmp_path: Path, site: Path) -> None:
    make_dist(
        site,
        "flashinfer-python",
        "0.7.4",
        requires=("torch", "nvidia-cutlass-dsl>=99.0; extra == 'dev'", "nvidia-cutlass-dsl>=4.8.0"),
    )
    make_dist(site, "nvidia-cutlass-dsl", "4.3.4")
    facts = flashinfer.probe(packages.probe(), {"HOME": str(tmp_path)})
    assert facts.era == "cutedsl" and facts.gdn_module is None
    assert facts.cutlass_dsl_requirement == ">=4.8.0"  # the extra's requirement is not a floor
    assert facts.cutlass_dsl_version == "4.3.4"
    assert facts.cutlass_dsl_satisfied is False
    assert facts.prebuilt_gdn is None
    assert facts.gdn_supports(10, 0) and facts.gdn_supports(12, 1) and not facts.gdn_supports(8, 6)


def test_gdn_kernel_modules_follow_the_archs_and_the_modules_this_flashinfer_ships(
    tmp_path: Path, site: Path
) -> None:
    make_dist(site, "flashinfer-python", "0.6.18")
    kernels = site / "flashinfer" / "gdn_kernels"
    for relative in ("delta_rule_dsl/delta_rule_sm90.py", "blackwell/gdn_prefill.py"):  # no SM120 module
        (kernels / relative).parent.mkdir(parents=True, exist_ok=True)
        (kernels / relative).write_text("")
    (site / "flashinfer" / "__init__.py").write_text("")
    facts = flashinfer.probe(packages.probe(), {"HOME": str(tmp_path)})
    assert facts.package_dir == str(site / "flashinfer")

    def modules(*majors: int) -> list[tuple[str, str]]:
        return [(k.label, k.module) for k in flashinfer.gdn_kernel_modules(facts, majors)]

    assert modules() == [("SM90", "flashinfer.gdn_kernels.delta_rule_dsl.delta_rule_sm90")]  # no GPU known
    assert modules(10, 12, 10) == [("SM100", "flashinfer.gdn_kernels.blackwell.gdn_prefill")]
    assert modules(8) == []  # no GDN prefill kernel for that arch
    absent = flashinfer.probe(packages.probe(("jitguard-no-such-dist",)), {"HOME": str(tmp_path)})
    assert flashinfer.gdn_kernel_modules(absent, [9]) == ()  # not the CuTeDSL era


def test_not_installed(tmp_path: Path) -> None:
    pkgs = packages.probe(("jitguard-no-such-dist",))
    facts = flashinfer.probe(pkgs, {"HOME": str(tmp_path)})
    assert (facts.installed, facts.era, facts.version) == (False, "none", None)
    assert facts.workspace_dir == tmp_path / ".cache" / "flashinfer"
    assert not facts.gdn_supports(9, 0)


# --- probe_import


@pytest.fixture
def modules(tmp_path: Path) -> dict[str, str]:
    mods = tmp_path / "mods"
    mods.mkdir()
    (mods / "jg_raises.py").write_text(
        "def load():\n    raise ImportError('cannot import name cute_kernel from cutlass.cute')\nload()\n"
    )
    (mods / "jg_aborts.py").write_text("import os\nos.abort()\n")
    (mods / "jg_hangs.py").write_text("import time\ntime.sleep(60)\n")
    (mods / "jg_fine.py").write_text("VALUE = 1\n")
    (mods / "jg_atexit.py").write_text("import atexit\natexit.register(print, 'bye from jg_atexit')\n")
    return {**os.environ, "PYTHONPATH": str(mods)}


def test_probe_import_ok(modules: dict[str, str]) -> None:
    probe = probe_import("jg_fine", env=modules)
    assert probe.ok and probe.error_type is None and probe.seconds >= 0


def test_probe_import_ignores_what_the_package_prints_at_exit(modules: dict[str, str]) -> None:
    probe = probe_import("jg_atexit", env=modules)
    assert probe.ok and probe.error_type is None


def test_probe_import_reports_the_original_exception(modules: dict[str, str]) -> None:
    probe = probe_import("jg_raises", env=modules)
    assert not probe.ok
    assert probe.error_type == "ImportError"
    assert probe.error_message == "cannot import name cute_kernel from cutlass.cute"
    assert probe.traceback_tail is not None and "jg_raises.py" in probe.traceback_tail
    missing = probe_import("jitguard_no_such_module", env=modules)
    assert missing.error_type == "ModuleNotFoundError"


def test_probe_import_survives_a_crashing_interpreter(modules: dict[str, str]) -> None:
    probe = probe_import("jg_aborts", env=modules)
    assert not probe.ok and probe.error_type == "Crash"
    assert "status -6" in (probe.error_message or "")


def test_probe_import_times_out(modules: dict[str, str]) -> None:
    probe = probe_import("jg_hangs", env=modules, timeout=1)
    assert not probe.ok and probe.error_type == "Timeout"


def test_probe_import_rejects_non_module_names() -> None:
    with pytest.raises(ValueError, match="not a module name"):
        probe_import("os; import shutil")


# --- flashinfer-cubin: kernel binaries, no module (the lists are read from the real wheels: tests/data/flashinfer-wheels)


@pytest.mark.parametrize("version", ["0.6.6", "0.6.13"])
def test_cubin_families_of_the_real_wheels_are_known_with_their_launchers(
    tmp_path: Path, site: Path, version: str
) -> None:
    from jitguard.facts.flashinfer_modules import CUBIN_LAUNCHERS, cubin_kernels, prebuilt

    listing = (
        Path(__file__).resolve().parents[2]
        / "data"
        / "flashinfer-wheels"
        / f"flashinfer_cubin-{version}.files"
    )
    make_dist(site, "flashinfer-cubin", version)
    for name in listing.read_text().splitlines():
        if name.startswith("#") or ".dist-info/" in name:
            continue
        (site / name).parent.mkdir(parents=True, exist_ok=True)
        (site / name).write_text(f'__version__ = "{version}"\n' if name.endswith("_build_meta.py") else "")
    (site / "flashinfer_cubin" / "cubins" / "flashinfer" / "trtllm").mkdir(
        parents=True
    )  # headers fetched later
    facts = flashinfer.probe(packages.probe(), fi_env(tmp_path))
    assert facts.cubin_version == version
    assert facts.cubin_dir == site / "flashinfer_cubin" / "cubins"
    assert cubin_kernels(facts) == tuple(sorted(CUBIN_LAUNCHERS.items()))
    assert prebuilt(facts, ("fmha", "trtllm_gemm", "fused_moe", "sampling")) == ()  # no module among them
