"""Toolchain checks: which backends and eras they apply to, and the findings (with filled, runnable fixes)
they
give for real probe results under restricted environments (stand-in nvcc scripts for versions not
installed)."""

from __future__ import annotations

import shlex
import shutil
import stat
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from jitguard.facts import libcuda, libstdcxx, toolchain
from jitguard.findings.catalog import CATALOG, make
from jitguard.findings.catalog import toolchain as toolchain_catalog
from jitguard.findings.checks_toolchain import check, check_built_library
from jitguard.findings.model import Finding

AGREED_CODES = {
    "nvcc-missing",
    "nvcc-too-old",
    "ninja-missing",
    "cxx-missing",
    "link-missing-libcuda",
    "link-missing-libcudart",
    "libstdcxx-runtime-older",
    "so-glibcxx-missing",
    "cuda-headers-missing",
    "nvcc-arch-unsupported",
}


def _fake_nvcc(home: Path, version: str) -> None:
    release = ".".join(version.split(".")[:2])
    lines = [
        "nvcc: NVIDIA (R) Cuda compiler driver",
        f"Cuda compilation tools, release {release}, V{version}",
    ]
    script = home / "bin" / "nvcc"
    script.parent.mkdir(parents=True, exist_ok=True)
    script.write_text("#!/bin/sh\n" + "".join(f"echo {shlex.quote(line)}\n" for line in lines))
    script.chmod(script.stat().st_mode | stat.S_IXUSR)


def _path_with(tmp_path: Path, *tools: str) -> str:
    bindir = tmp_path / "bin"
    bindir.mkdir(exist_ok=True)
    for tool in tools:
        real = shutil.which(tool)
        if real is None:
            pytest.skip(f"{tool} is not installed")
        (bindir / tool).symlink_to(real)
    return str(bindir)


def _facts(env: dict[str, str], era: str | None = "nvcc", prebuilt: Path | None = None) -> SimpleNamespace:
    """Real probe results for ``env``; the FlashInfer facts (another engineer's probe) reduced to
    era/prebuilt."""
    tc = toolchain.probe(env)
    return SimpleNamespace(
        toolchain=tc,
        link=libcuda.probe(tc, env, cache_dir=None),
        libstdcxx=libstdcxx.probe(tc, env),
        flashinfer=SimpleNamespace(era=era, prebuilt_gdn=prebuilt),
    )


def _codes(findings: list[Finding]) -> set[str]:
    return {f.code for f in findings}


@pytest.fixture
def broken_env(tmp_path: Path) -> dict[str, str]:
    """No nvcc, no ninja, no compiler: every toolchain finding would fire for the nvcc era."""
    empty = tmp_path / "empty-cuda"
    empty.mkdir()
    return {"PATH": str(tmp_path / "nothing"), "CUDA_HOME": str(empty), "CXX": "/nonexistent/c++"}


def test_catalog_has_exactly_the_agreed_toolchain_codes() -> None:
    assert {e.code for e in toolchain_catalog.ENTRIES} == AGREED_CODES
    assert all(CATALOG[c].area == "toolchain" for c in AGREED_CODES)
    assert CATALOG["libstdcxx-runtime-older"].severity == "warning"
    assert all(CATALOG[c].severity == "error" for c in AGREED_CODES - {"libstdcxx-runtime-older"})
    assert all(CATALOG[c].fixes for c in AGREED_CODES)


@pytest.mark.parametrize("backend", ["triton", "torch"])
def test_other_backends_need_no_toolchain(broken_env: dict[str, str], backend: str) -> None:
    assert check(_facts(broken_env), backend) == []  # type: ignore[arg-type]


@pytest.mark.parametrize("era", ["cutedsl", "none", "too-old"])
def test_flashinfer_eras_without_a_host_build_need_no_toolchain(broken_env: dict[str, str], era: str) -> None:
    assert check(_facts(broken_env, era=era), "flashinfer") == []  # type: ignore[arg-type]


def test_nvcc_era_with_nothing_installed_reports_each_missing_tool(broken_env: dict[str, str]) -> None:
    findings = check(_facts(broken_env), "flashinfer")  # type: ignore[arg-type]
    assert _codes(findings) == {"nvcc-missing", "ninja-missing", "cxx-missing"}
    assert all(f.backend == "flashinfer" and f.severity == "error" for f in findings)
    nvcc = next(f for f in findings if f.code == "nvcc-missing")
    assert any("empty-cuda/bin/nvcc" in e for e in nvcc.evidence)


def test_era_unknown_is_checked_like_the_nvcc_era(broken_env: dict[str, str]) -> None:
    assert "nvcc-missing" in _codes(check(_facts(broken_env, era=None), "flashinfer"))  # type: ignore[arg-type]


def test_nvcc_older_than_12_6_is_too_old_for_sm90_gdn(tmp_path: Path) -> None:
    home = tmp_path / "cuda-12.4"
    _fake_nvcc(home, "12.4.131")
    env = {"PATH": _path_with(tmp_path, "c++", "ninja"), "CUDA_HOME": str(home)}
    findings = check(_facts(env), "flashinfer")  # type: ignore[arg-type]
    old = [f for f in findings if f.code == "nvcc-too-old"]
    assert len(old) == 1
    assert "12.4.131" in old[0].title
    assert any("release 12.4" in e for e in old[0].evidence)


def test_nvcc_12_6_is_new_enough(tmp_path: Path) -> None:
    home = tmp_path / "cuda-12.6"
    _fake_nvcc(home, "12.6.85")
    env = {"PATH": _path_with(tmp_path, "c++", "ninja"), "CUDA_HOME": str(home)}
    assert "nvcc-too-old" not in _codes(check(_facts(env), "flashinfer"))  # type: ignore[arg-type]


def test_missing_headers_point_at_a_toolkit_that_has_them(tmp_path: Path) -> None:
    real = next((h for h in toolchain.probe().cuda_homes if h.has_headers and h.has_nvcc), None)
    if real is None:
        pytest.skip("no CUDA toolkit with headers on this machine")
    home = tmp_path / "headerless"
    _fake_nvcc(home, "12.8.93")  # answers --version, adds no include dirs
    env = {"PATH": _path_with(tmp_path, "c++", "ninja"), "CUDA_HOME": str(home)}
    findings = check(_facts(env), "flashinfer")  # type: ignore[arg-type]
    headers = [f for f in findings if f.code == "cuda-headers-missing"]
    assert len(headers) == 1
    commands = [f.command for f in headers[0].fixes]
    assert commands[0] is not None and commands[0].startswith("export CUDA_HOME=")
    assert (Path(shlex.split(commands[0])[1].split("=", 1)[1]) / "include" / "cuda_runtime.h").is_file()


def test_fixes_with_unfilled_fields_are_dropped_and_filled_ones_kept() -> None:
    from jitguard.findings.catalog import CATALOG

    bare = make("link-missing-libcuda", backend="flashinfer", cuda_major=12, cuda_minor=8)
    assert len(bare.fixes) < len(CATALOG["link-missing-libcuda"].fixes)  # make() leaves out fixes with holes
    assert not any("{" in (f.command or "") + f.text for f in bare.fixes)
    assert any(f.command and "cuda-driver-dev-12-8" in f.command for f in bare.fixes)


def test_check_built_library_is_empty_for_an_unreadable_module(tmp_path: Path) -> None:
    runtime = libstdcxx.probe(toolchain.probe())
    not_elf = tmp_path / "module.so"
    not_elf.write_text("not an ELF file")
    assert check_built_library(not_elf, runtime) == []
    assert check_built_library(tmp_path / "absent.so", runtime) == []


def test_a_prebuilt_module_needs_no_compiler_only_a_load_check(broken_env: dict[str, str]) -> None:
    prebuilt = Path(sys.executable).resolve()  # a real ELF file that needs no GLIBCXX version
    assert check(_facts(broken_env), "flashinfer")  # type: ignore[arg-type]
    assert check(_facts(broken_env, prebuilt=prebuilt), "flashinfer") == []  # type: ignore[arg-type]


def test_check_built_library_says_nothing_when_the_libstdcxx_facts_are_unavailable(tmp_path: Path) -> None:
    """Seen on the H200 without pyelftools: a finished FlashInfer build crashed on this check (FactUnavailable)
    instead of loading the module it had built."""
    import subprocess

    from jitguard.facts import Unavailable

    source = tmp_path / "m.cpp"
    source.write_text('#include <string>\nextern "C" int f() { return std::string("x").size(); }\n')
    so = tmp_path / "m.so"
    subprocess.run(["g++", "-shared", "-fPIC", str(source), "-o", str(so)], check=True)
    missing = Unavailable("libstdcxx", "ModuleNotFoundError: No module named 'elftools'")
    assert check_built_library(so, missing) == []  # type: ignore[arg-type]
