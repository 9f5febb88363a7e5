"""The toolchain probe under real, restricted environments: PATHs that lack a tool, CUDA_HOME pointing at
empty
directories, and stand-in nvcc executables (real scripts that print a real nvcc banner) for versions this
machine does not have."""

from __future__ import annotations

import os
import shlex
import shutil
import stat
from pathlib import Path

import pytest

from jitguard.facts import toolchain

NVCC_BANNER = """nvcc: NVIDIA (R) Cuda compiler driver
Copyright (c) 2005-2024 NVIDIA Corporation
Built on Thu_Mar_28_02:18:24_PDT_2024
Cuda compilation tools, release {release}, V{version}
Build cuda_{release}.r{release}/compiler.34097967_0
"""


def _script(path: Path, body: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def _fake_nvcc(home: Path, version: str) -> Path:
    release = ".".join(version.split(".")[:2])
    banner = NVCC_BANNER.format(release=release, version=version)
    # echo is a shell builtin: the script works on PATHs that hold nothing else.
    return _script(
        home / "bin" / "nvcc", "".join(f"echo {shlex.quote(line)}\n" for line in banner.splitlines())
    )


def _bin_with(tmp_path: Path, *tools: str) -> str:
    """A PATH holding only links to the named real tools."""
    bindir = tmp_path / "bin"
    bindir.mkdir(exist_ok=True)
    for tool in tools:
        real = shutil.which(tool)
        if real is None:
            pytest.skip(f"{tool} is not installed")
        (bindir / tool).symlink_to(real)
    return str(bindir)


def test_nvcc_missing_is_reported_not_raised(tmp_path: Path) -> None:
    empty_home = tmp_path / "no-cuda"
    empty_home.mkdir()
    facts = toolchain.probe({"PATH": _bin_with(tmp_path, "c++"), "CUDA_HOME": str(empty_home)})
    assert facts.nvcc.found is False
    assert facts.nvcc.command == (f"{empty_home}/bin/nvcc",)
    assert facts.nvcc.error and "does not exist" in facts.nvcc.error
    assert facts.nvcc_release is None
    assert facts.nvcc_on_path is None


def test_ninja_missing_from_path_is_reported(tmp_path: Path) -> None:
    facts = toolchain.probe({"PATH": _bin_with(tmp_path, "c++"), "CUDA_HOME": str(tmp_path)})
    assert facts.ninja.found is False and facts.ninja.error == "ninja is not on PATH"
    assert facts.cxx.usable and facts.cxx.version


def test_cxx_named_by_cxx_that_does_not_exist_is_reported(tmp_path: Path) -> None:
    facts = toolchain.probe({"PATH": _bin_with(tmp_path, "c++"), "CXX": "/nonexistent/g++-99"})
    assert facts.cxx_source == "CXX"
    assert facts.cxx.found is False
    assert facts.cxx.error and "named by CXX" in facts.cxx.error


def test_cxx_with_a_launcher_keeps_the_whole_command(tmp_path: Path) -> None:
    path = _bin_with(tmp_path, "c++", "env")
    facts = toolchain.probe({"PATH": path, "CXX": "env c++"})
    assert facts.cxx.command == ("env", "c++")
    assert facts.cxx.usable and facts.cxx.version


def test_cuda_home_follows_flashinfers_order(tmp_path: Path) -> None:
    nvcc_home = tmp_path / "from-path"
    _fake_nvcc(nvcc_home, "12.4.131")
    path = str(nvcc_home / "bin")
    assert toolchain.resolve_cuda_home({"PATH": path, "CUDA_HOME": "/a", "CUDA_PATH": "/b"}) == (
        "/a",
        "CUDA_HOME",
    )
    assert toolchain.resolve_cuda_home({"PATH": path, "CUDA_HOME": "", "CUDA_PATH": "/b"}) == (
        "/b",
        "CUDA_PATH",
    )
    assert toolchain.resolve_cuda_home({"PATH": path}) == (str(nvcc_home), "which nvcc")


def test_cuda_home_from_a_wrapper_on_path_is_the_wrappers_prefix_not_the_toolkit(tmp_path: Path) -> None:
    # FlashInfer does not resolve symlinks or wrapper scripts: /usr/local/bin/nvcc gives cuda_home /usr/local.
    real_home = tmp_path / "cuda-12.8"
    _fake_nvcc(real_home, "12.8.93")
    wrapper_prefix = tmp_path / "usr-local"
    _script(wrapper_prefix / "bin" / "nvcc", f'exec {real_home}/bin/nvcc "$@"\n')
    facts = toolchain.probe({"PATH": f"{wrapper_prefix / 'bin'}:{_bin_with(tmp_path, 'c++')}"})
    assert (facts.cuda_home, facts.cuda_home_source) == (str(wrapper_prefix), "which nvcc")
    assert facts.nvcc.version == "12.8.93" and facts.nvcc_release == (12, 8)


def test_flashinfer_nvcc_overrides_cuda_home_and_expands_the_ninja_variable(tmp_path: Path) -> None:
    home = tmp_path / "cuda"
    _fake_nvcc(home, "12.6.85")
    env = {
        "PATH": _bin_with(tmp_path, "c++"),
        "CUDA_HOME": str(home),
        "FLASHINFER_NVCC": "$cuda_home/bin/nvcc",
    }
    facts = toolchain.probe(env)
    assert facts.nvcc_source == "FLASHINFER_NVCC"
    assert facts.nvcc.command == (f"{home}/bin/nvcc",)
    assert facts.nvcc_release == (12, 6)


def test_real_nvcc_reports_its_own_toolkit_and_headers() -> None:
    facts = toolchain.probe()
    if not facts.nvcc.usable:
        pytest.skip("no nvcc on this machine")
    assert facts.nvcc_release is not None and facts.nvcc.version is not None
    assert facts.nvcc.version.startswith(f"{facts.nvcc_release[0]}.{facts.nvcc_release[1]}")
    assert facts.nvcc_toolkit_dir is not None and os.path.isdir(facts.nvcc_toolkit_dir)
    assert facts.nvcc_finds_headers


def test_a_hanging_version_command_times_out_into_an_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(toolchain, "VERSION_TIMEOUT_S", 0.5)
    home = tmp_path / "cuda"
    _script(home / "bin" / "nvcc", f"exec {shutil.which('sleep')} 30\n")
    facts = toolchain.probe({"PATH": _bin_with(tmp_path, "c++"), "CUDA_HOME": str(home)})
    assert facts.nvcc.found and not facts.nvcc.usable
    assert facts.nvcc.error and "did not answer" in facts.nvcc.error


def test_cuda_home_version_is_read_from_cuda_h_without_running_nvcc(tmp_path: Path) -> None:
    home = tmp_path / "cuda-12.9"
    (home / "include").mkdir(parents=True)
    (home / "include" / "cuda.h").write_text("#pragma once\n#define CUDA_VERSION 12090\n")
    (home / "include" / "cuda_runtime.h").write_text("")
    homes = toolchain.find_cuda_homes({}, [str(home)])
    mine = [h for h in homes if h.path == str(home)]
    assert mine and mine[0].version == "12.9" and mine[0].has_headers and not mine[0].has_nvcc
