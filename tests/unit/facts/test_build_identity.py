"""The build identity: what decides the bytes of a build, and nothing about where it runs."""

from __future__ import annotations

import copy
from typing import Any

from jitguard.facts import build_identity

DESCRIBED: dict[str, Any] = {
    "schema": 1,
    "python": "3.11",
    "machine": "x86_64",
    "packages": {"flashinfer-python": "0.6.6", "torch": "2.13.0"},
    "gpu": {"capabilities": [], "driver": None},
    "toolchain": {
        "nvcc": {"path": "/usr/local/cuda/bin/nvcc", "version": "13.0"},
        "cxx": {"path": "/usr/bin/c++", "version": "12.2.0"},
        "ninja": {"path": "/usr/bin/ninja", "version": "1.11.1"},
        "cuda_home": "/usr/local/cuda",
    },
    "libstdcxx": {
        "compiler": {"path": "/usr/lib/libstdc++.so.6", "max": "3.4.30"},
        "runtime": {"max": "3.4.30"},
    },
    "link": {"libcuda": False},
    "env": {
        "FLASHINFER_CUDA_ARCH_LIST": "9.0a",
        "FLASHINFER_WORKSPACE_BASE": "/build/ws",
        "CUDA_HOME": "/usr/local/cuda",
        "LD_LIBRARY_PATH": "/opt/lib",
    },
}


def _changed(path: tuple[str, ...], value: Any) -> dict[str, Any]:
    described = copy.deepcopy(DESCRIBED)
    node = described
    for part in path[:-1]:
        node = node[part]
    node[path[-1]] = value
    return described


def test_where_things_are_and_the_gpu_driver_do_not_change_the_identity() -> None:
    key = build_identity.compute(DESCRIBED)
    for path, value in [
        (("env", "FLASHINFER_WORKSPACE_BASE"), "/serve/elsewhere"),
        (("env", "CUDA_HOME"), "/opt/cuda-13.0"),
        (("env", "LD_LIBRARY_PATH"), "/usr/lib64"),
        (("toolchain", "nvcc", "path"), "/opt/cuda-13.0/bin/nvcc"),
        (("gpu", "driver"), "580.65"),
        (("gpu", "capabilities"), ["9.0"]),  # the arch list is fixed, so the GPU does not matter
        (("link", "libcuda"), True),
        (("libstdcxx", "runtime", "max"), "3.4.33"),
    ]:
        assert build_identity.compute(_changed(path, value)) == key, path


def test_what_changes_the_compiled_bytes_changes_the_identity() -> None:
    key = build_identity.compute(DESCRIBED)
    for path, value in [
        (("packages", "flashinfer-python"), "0.6.7"),
        (("packages", "torch"), "2.14.0"),
        (("toolchain", "nvcc", "version"), "12.8"),
        (("toolchain", "cxx", "version"), "13.3.0"),
        (("libstdcxx", "compiler", "max"), "3.4.33"),
        (("env", "FLASHINFER_CUDA_ARCH_LIST"), "10.0a"),
        (("env", "FLASHINFER_EXTRA_CUDAFLAGS"), "-lineinfo"),
        (("python",), "3.12"),
    ]:
        assert build_identity.compute(_changed(path, value)) != key, path


def test_without_an_arch_list_the_gpu_arch_is_part_of_the_identity() -> None:
    unset = copy.deepcopy(DESCRIBED)
    del unset["env"]["FLASHINFER_CUDA_ARCH_LIST"]
    hopper = _changed(("gpu", "capabilities"), ["9.0"])
    del hopper["env"]["FLASHINFER_CUDA_ARCH_LIST"]
    assert build_identity.compute(unset) != build_identity.compute(hopper)


def test_an_unknown_part_never_matches_a_known_one() -> None:
    unknown = {**DESCRIBED, "unavailable": {"toolchain": "RuntimeError: boom"}}
    assert build_identity.compute(unknown) != build_identity.compute(DESCRIBED)
