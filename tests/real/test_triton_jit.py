"""Triton's JIT prerequisites, for real: the stub built with the real gcc, a machine with no compiler reachable
(an empty PATH, CC naming nothing), an include dir without Python.h, libcuda found the way Triton finds it
(a libcuda.so.1 built here with gcc), each judged against the real Triton 3.6 doing the same thing in a
subprocess, and `jitguard doctor --json` showing the code under the triton backend."""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from envelope_schemas import schema_errors
from jitguard.facts import triton_jit
from jitguard.findings import checks_triton
from jitguard.findings.classify import classify
from release_preparation import CI_ROOT

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")

SRC = Path(__file__).resolve().parents[2] / "src"
TRITON = "3.6.0"  # what torch 2.11 brings (the H200 host's); -l:libcuda.so.1 rules
ROOT = Path(os.environ.get("JITGUARD_TRITON_ROOT") or CI_ROOT / "triton")


@pytest.fixture(autouse=True)
def _fresh_verdicts() -> None:
    triton_jit.forget()


@pytest.fixture(scope="session")
def real_triton() -> Path:
    """Triton 3.6.0 from PyPI (``pip install --no-deps --target``, once per machine, ~150 MB download): read
    by the facts as installed, run in subprocesses to compare with."""
    target = ROOT / f"triton-{TRITON}"
    ROOT.mkdir(parents=True, exist_ok=True)
    with open(ROOT / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (target / "ready").exists():
            shutil.rmtree(target, ignore_errors=True)
            proc = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "pip",
                    "install",
                    "-q",
                    "--no-deps",
                    "--target",
                    str(target),
                    f"triton=={TRITON}",
                ],
                capture_output=True,
                text=True,
                timeout=900,
                stdin=subprocess.DEVNULL,
            )
            if proc.returncode != 0:
                message = f"could not install triton=={TRITON}: {(proc.stdout + proc.stderr).strip()[-500:]}"
                if os.environ.get("CI"):
                    pytest.fail(message)
                pytest.skip(message)
            (target / "ready").touch()
    return target


def _empty_ldconfig(tmp_path: Path) -> str:
    """A loader cache that lists no libcuda, whatever this machine's lists (a real process, as ldconfig is)."""
    tool = tmp_path / "ldconfig"
    tool.write_text("#!/bin/sh\necho '0 libs found in cache'\n")
    tool.chmod(0o755)
    return str(tool)


def _no_compiler_env(tmp_path: Path) -> dict[str, str]:
    empty = tmp_path / "empty-bin"
    empty.mkdir(exist_ok=True)
    return {**os.environ, "PATH": str(empty), "CC": str(tmp_path / "no-such-cc")}


def _real_triton_build(triton: Path, env: dict[str, str], tmp_path: Path) -> str:
    """Real Triton's launcher build (runtime/build.py ``_build``) of a C file here: 'ok' or its error."""
    src = tmp_path / "probe.c"
    src.write_text("#include <Python.h>\nint probe(void) { return 0; }\n")
    code = (
        "import sys, triton.runtime.build as b\n"
        "try:\n"
        f"    b._build('probe', {str(src)!r}, {str(tmp_path)!r}, [], [], [], [])\n"
        "    print('ok')\n"
        "except Exception as e:\n"
        "    print(type(e).__name__ + ': ' + str(e))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        env={**env, "PYTHONPATH": str(triton)},
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )
    return proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else proc.stderr[-500:]


def _facts(jit: triton_jit.TritonJitFacts, *, gpu: bool = False) -> Any:
    return SimpleNamespace(triton_jit=jit, gpu=SimpleNamespace(present=gpu))


def test_the_stub_builds_with_the_real_gcc_as_triton_builds_its_launcher(tmp_path: Path) -> None:
    jit = triton_jit.probe(TRITON, dict(os.environ), ldconfig=_empty_ldconfig(tmp_path))
    assert jit.cc.source in ("CC", "PATH") and jit.cc.path is not None
    assert jit.python_h and jit.compile.ok, jit.compile.output
    assert jit.compile.command[1:8] == ("stub.c", "-O3", "-shared", "-fPIC", "-Wno-psabi", "-o", "stub.so")
    assert checks_triton.check(_facts(jit), "triton") == []  # no GPU: libcuda is not judged (see below)
    again = triton_jit.probe(TRITON, dict(os.environ), ldconfig=_empty_ldconfig(tmp_path))
    assert again.compile.cached and again.compile.ok


def test_no_compiler_reachable_is_triton_cc_missing_as_real_triton_fails(
    tmp_path: Path, real_triton: Path
) -> None:
    env = _no_compiler_env(tmp_path)
    jit = triton_jit.probe(TRITON, env, ldconfig=_empty_ldconfig(tmp_path))
    assert jit.cc.source == "CC" and jit.cc.path is None
    assert jit.compile.status == "cc-missing"
    [finding] = checks_triton.check(_facts(jit), "triton")
    assert finding.code == "triton-cc-missing" and finding.severity == "error"
    assert f"CC='{tmp_path / 'no-such-cc'}'" in finding.cause
    assert any(f.command == "apt-get install -y gcc" for f in finding.fixes)
    assert "FileNotFoundError" in _real_triton_build(real_triton, env, tmp_path)

    unset = {k: v for k, v in env.items() if k != "CC"}
    jit = triton_jit.probe(TRITON, unset, ldconfig=_empty_ldconfig(tmp_path))
    assert jit.cc.source == "none" and jit.compile.status == "cc-missing"
    said = _real_triton_build(real_triton, unset, tmp_path)
    assert said.startswith(
        "RuntimeError: Failed to find C compiler. Please specify via CC environment variable"
    )
    [classified] = classify(said, 1, backend="triton")
    assert classified.code == "triton-cc-missing"


def test_python_h_missing_is_triton_python_headers_missing(tmp_path: Path) -> None:
    empty = tmp_path / "include"
    empty.mkdir()
    jit = triton_jit.probe(
        TRITON, dict(os.environ), include_dir=str(empty), ldconfig=_empty_ldconfig(tmp_path)
    )
    assert not jit.python_h and jit.compile.status == "headers-missing"
    assert "Python.h: No such file or directory" in jit.compile.output  # gcc's own words
    [finding] = checks_triton.check(_facts(jit), "triton")
    assert finding.code == "triton-python-headers-missing"
    version = "{}.{}".format(*sys.version_info[:2])
    assert f"apt-get install -y python{version}-dev" in [f.command for f in finding.fixes]
    [classified] = classify(jit.compile.output, 1, backend="triton")
    assert classified.code == "triton-python-headers-missing"
    assert f"python{version}-dev" in classified.fixes[0].command


def _libcuda_dir(tmp_path: Path) -> Path:
    """A directory with a real shared library named libcuda.so.1 (and no libcuda.so), as a container's
    driver mount has."""
    lib = tmp_path / "driver"
    lib.mkdir()
    (lib / "cuda.c").write_text("int cuInit(unsigned int flags) { return (int)flags; }\n")
    subprocess.run(
        ["gcc", "-shared", "-fPIC", "-Wl,-soname,libcuda.so.1", "cuda.c", "-o", "libcuda.so.1"],
        cwd=lib,
        check=True,
    )
    return lib


def test_libcuda_is_found_as_real_triton_finds_it_and_linked_with_its_flag(
    tmp_path: Path, real_triton: Path
) -> None:
    lib = _libcuda_dir(tmp_path)
    ldconfig = _empty_ldconfig(tmp_path)
    env = {**os.environ, "LD_LIBRARY_PATH": str(lib)}
    env.pop("TRITON_LIBCUDA_PATH", None)
    jit = triton_jit.probe(TRITON, env, ldconfig=ldconfig)
    assert jit.libcuda.found and jit.libcuda.dirs == (str(lib),) and jit.libcuda.source == "LD_LIBRARY_PATH"
    assert jit.link.ok and "-l:libcuda.so.1" in jit.link.command, jit.link.output
    # Triton up to 3.5 links -lcuda: the same directory, without libcuda.so, fails to link.
    old = triton_jit.probe("3.5.0", env, ldconfig=ldconfig)
    assert old.link.status == "libcuda-missing" and "cannot find -lcuda" in old.link.output
    [finding] = checks_triton.check(_facts(old, gpu=True), "triton")
    assert finding.code == "triton-libcuda-missing" and "-lcuda" in finding.cause
    if not triton_jit.find_libcuda(TRITON, os.environ).listed:  # real Triton reads the real loader cache
        code = "import triton.backends.nvidia.driver as d; print(d.libcuda_dirs())"
        out = subprocess.run(
            [sys.executable, "-c", code],
            env={**env, "PYTHONPATH": str(real_triton)},
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert out.stdout.strip() == repr([str(lib)]), out.stderr[-800:]


def test_no_libcuda_is_an_error_only_where_a_gpu_is(tmp_path: Path, real_triton: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("LD_LIBRARY_PATH", "TRITON_LIBCUDA_PATH")}
    jit = triton_jit.probe(TRITON, env, ldconfig=_empty_ldconfig(tmp_path))
    assert not jit.libcuda.found and jit.link.status == "not-run"
    assert jit.libcuda.error is not None and jit.libcuda.error.startswith("libcuda.so cannot found!")
    assert checks_triton.check(_facts(jit, gpu=False), "triton") == []  # gpu-none says it; no driver here
    [finding] = checks_triton.check(_facts(jit, gpu=True), "triton")
    assert finding.code == "triton-libcuda-missing" and finding.severity == "error"
    assert [f.command for f in finding.fixes] == ["ldconfig"]  # no driver library anywhere to point at
    code = "import triton.backends.nvidia.driver as d\ntry:\n d.libcuda_dirs()\nexcept AssertionError as e:\n print(e)"
    if not triton_jit.find_libcuda(TRITON, os.environ).listed:
        said = subprocess.run(
            [sys.executable, "-c", code],
            env={**env, "PYTHONPATH": str(real_triton)},
            capture_output=True,
            text=True,
            timeout=120,
        ).stdout
        assert said.startswith("libcuda.so cannot found!")
        assert [f.code for f in classify(said, 1, backend="triton")] == ["triton-libcuda-missing"]


def test_triton_libcuda_path_without_the_library_fails_the_link(tmp_path: Path) -> None:
    empty = tmp_path / "nothing"
    empty.mkdir()
    env = {**os.environ, "TRITON_LIBCUDA_PATH": str(empty)}
    jit = triton_jit.probe(TRITON, env, ldconfig=_empty_ldconfig(tmp_path))
    assert jit.libcuda.found and jit.libcuda.source == "TRITON_LIBCUDA_PATH"  # Triton takes it unchecked
    assert jit.link.status == "libcuda-missing", jit.link.output
    [finding] = checks_triton.check(_facts(jit, gpu=True), "triton")
    assert finding.code == "triton-libcuda-missing"
    assert "cannot find -l:libcuda.so.1" in " ".join(finding.evidence)


def test_doctor_json_shows_triton_cc_missing_under_the_triton_backend(
    tmp_path: Path, real_triton: Path
) -> None:
    env = _no_compiler_env(tmp_path)
    env["PYTHONPATH"] = os.pathsep.join([str(SRC), str(real_triton)])
    env["JITGUARD_CACHE_DIR"] = str(tmp_path / "cache")
    proc = subprocess.run(
        [sys.executable, "-m", "jitguard", "doctor", "--json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )
    assert proc.returncode == 1, proc.stderr[-2000:]
    report = json.loads(proc.stdout)
    assert schema_errors(report) == []  # the shipped JSON Schema describes triton_jit
    triton = report["backends"]["triton"]
    codes = [f["code"] for f in triton["findings"]]
    assert "triton-cc-missing" in codes and not triton["usable"]
    assert report["facts"]["triton_jit"]["compile"]["status"] == "cc-missing"
    assert all(
        "triton-cc-missing" not in [f["code"] for f in b["findings"]]
        for n, b in report["backends"].items()
        if n != "triton"
    )
