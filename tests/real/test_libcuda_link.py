"""The trial link, for real: on this machine (no libcuda.so anywhere) FlashInfer's link line fails with the
linker's own `cannot find -lcuda`; a stub libcuda.so built here with gcc, pointed at through the exact fix the
finding proposes, makes the same link pass."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace

import pytest

from jitguard.facts import libcuda, libstdcxx, toolchain
from jitguard.findings import checks_toolchain, toolchain_fixes
from jitguard.findings.model import Finding

pytestmark = pytest.mark.skipif(
    shutil.which("gcc") is None or shutil.which("c++") is None, reason="needs gcc"
)

_SCRUBBED = ("FLASHINFER_EXTRA_LDFLAGS", "LIBRARY_PATH", "CONDA_PREFIX", "CUDA_PATH", "FLASHINFER_NVCC")


def _real_toolkit() -> str | None:
    """A CUDA toolkit here whose lib64 holds libcudart.so, so only -lcuda is in question."""
    for home in toolchain.probe().cuda_homes:
        if home.cudart_in_lib64:
            return home.path
    return None


@pytest.fixture
def base_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in _SCRUBBED}
    home = _real_toolkit()
    if home is not None:
        env["CUDA_HOME"] = home
    return env


@pytest.fixture(autouse=True)
def _needs_no_libcuda(base_env: dict[str, str], tmp_path: Path) -> None:
    link = libcuda.probe(toolchain.probe(base_env), base_env, cache_dir=None)
    if link.cuda.ok:
        pytest.skip("a libcuda.so is linkable on this machine; the failing case cannot be shown here")


def _probe(env: dict[str, str], cache_dir: Path | None = None) -> tuple[libcuda.LinkFacts, list[Finding]]:
    tc = toolchain.probe(env)
    link = libcuda.probe(tc, env, cache_dir=cache_dir)
    facts = SimpleNamespace(
        toolchain=tc, link=link, libstdcxx=libstdcxx.probe(tc, env), flashinfer=SimpleNamespace(era="nvcc")
    )
    return link, checks_toolchain.check(facts, "flashinfer")  # type: ignore[arg-type]


def _apply(command: str, env: dict[str, str]) -> dict[str, str]:
    """Run a fix's shell command in bash and return the environment it leaves behind."""
    proc = subprocess.run(
        ["bash", "-c", f"{command}\nenv -0"], env=env, capture_output=True, timeout=60, check=True
    )
    pairs = [item.split(b"=", 1) for item in proc.stdout.split(b"\0") if b"=" in item]
    return {k.decode(): v.decode() for k, v in pairs}


def _finding(findings: list[Finding], code: str) -> Finding:
    matching = [f for f in findings if f.code == code]
    assert len(matching) == 1, [f.code for f in findings]
    return matching[0]


def test_trial_link_fails_with_the_real_linker_command_and_error(base_env: dict[str, str]) -> None:
    link, findings = _probe(base_env)
    home = link.cuda_home
    assert link.cuda.status == "missing"
    assert link.cuda.returncode not in (0, None)
    assert [f"-L{home}/lib64", f"-L{home}/lib64/stubs", "-lcuda"] == [
        a for a in link.cuda.command if a.startswith(("-L", "-l"))
    ]
    assert "cannot find -lcuda" in link.cuda.output

    finding = _finding(findings, "link-missing-libcuda")
    assert finding.severity == "error"
    assert finding.evidence[0] == f"$ {shlex.join(link.cuda.command)}"
    assert any("cannot find -lcuda" in line for line in finding.evidence)
    assert link.link_command in finding.cause


def test_extra_ldflags_pointing_at_a_stub_libcuda_make_the_link_pass(
    base_env: dict[str, str], stub_libcuda_dir: Path
) -> None:
    stub_dir = stub_libcuda_dir
    link, findings = _probe({**base_env, "FLASHINFER_EXTRA_LDFLAGS": f"-L{stub_dir}"})
    assert link.cuda.ok, link.cuda.output
    assert f"-L{stub_dir}" in link.cuda.command
    assert "link-missing-libcuda" not in [f.code for f in findings]


def test_library_path_pointing_at_a_stub_libcuda_makes_the_link_pass(
    base_env: dict[str, str], stub_libcuda_dir: Path
) -> None:
    stub_dir = stub_libcuda_dir
    link, _ = _probe({**base_env, "LIBRARY_PATH": str(stub_dir)})
    assert link.cuda.ok, link.cuda.output
    assert link.cuda.library_path == str(stub_dir)


def test_the_fix_names_the_stub_directory_found_and_running_it_makes_the_link_pass(
    base_env: dict[str, str], tmp_path: Path, stub_libcuda_builder: Callable[..., Path]
) -> None:
    conda = tmp_path / "conda"
    stub_dir = stub_libcuda_builder(conda / "lib" / "stubs", layout="driver")
    env = {**base_env, "CONDA_PREFIX": str(conda)}
    link, findings = _probe(env)
    assert not link.cuda.ok
    assert link.fix_dirs("cuda")[0] == str(stub_dir)

    first = _finding(findings, "link-missing-libcuda").fixes[0]
    assert first.command == f'export FLASHINFER_EXTRA_LDFLAGS="$FLASHINFER_EXTRA_LDFLAGS -L{stub_dir}"'
    fixed, after = _probe(_apply(first.command, env))
    assert fixed.cuda.ok, fixed.cuda.output
    assert "link-missing-libcuda" not in [f.code for f in after]


def test_a_driver_library_without_the_unversioned_name_gets_a_working_symlink_fix(
    base_env: dict[str, str], tmp_path: Path, stub_libcuda_builder: Callable[..., Path]
) -> None:
    conda = tmp_path / "conda"
    stub_libcuda_builder(conda / "lib", layout="versioned-only")
    env = {**base_env, "CONDA_PREFIX": str(conda), "HOME": str(tmp_path / "home")}
    link, findings = _probe(env)
    assert link.fix_dirs("cuda") == ()
    assert [c.path for c in link.versioned_only("cuda")] == [str(conda / "lib" / "libcuda.so.1")]

    recipe = [
        f for f in _finding(findings, "link-missing-libcuda").fixes if f.command and "ln -sf" in f.command
    ]
    assert len(recipe) == 1
    assert recipe[0].command is not None and str(conda / "lib" / "libcuda.so.1") in recipe[0].command
    fixed, _ = _probe(_apply(recipe[0].command, env))
    assert fixed.cuda.ok, fixed.cuda.output


def test_results_are_cached_per_fingerprint_and_a_new_library_invalidates_them(
    base_env: dict[str, str], tmp_path: Path, stub_libcuda_builder: Callable[..., Path]
) -> None:
    cache = tmp_path / "cache"
    lib_dir = tmp_path / "later"
    lib_dir.mkdir()
    env = {**base_env, "FLASHINFER_EXTRA_LDFLAGS": f"-L{lib_dir}"}
    first, _ = _probe(env, cache)
    second, _ = _probe(env, cache)
    assert (first.cached, second.cached) == (False, True)
    assert second.cuda == first.cuda and second.fingerprint == first.fingerprint

    stub_libcuda_builder(
        lib_dir, layout="driver"
    )  # the fix appears in a searched directory: the old verdict must not be reused
    third, _ = _probe(env, cache)
    assert third.fingerprint != first.fingerprint
    assert (third.cached, third.cuda.ok) == (False, True)


def test_a_link_that_timed_out_is_not_remembered(
    base_env: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A real compiler whose link step hangs while a flag file exists (a host too busy to answer in time).
    slow = tmp_path / "slow"
    cxx = tmp_path / "cxx"
    cxx.write_text(
        f'#!/bin/sh\ncase " $* " in *" -shared "*) [ -e {slow} ] && exec sleep 60;; esac\nexec g++ "$@"\n'
    )
    cxx.chmod(0o755)
    env = {**base_env, "CXX": str(cxx)}
    cache = tmp_path / "cache"
    monkeypatch.setattr(libcuda, "TRIAL_TIMEOUT_S", 2.0)
    slow.touch()
    hung, _ = _probe(env, cache)
    assert hung.cuda.returncode is None and "did not finish" in hung.cuda.output
    slow.unlink()
    again, _ = _probe(env, cache)
    assert again.cached is False
    assert again.cuda.status == "missing" and again.cuda.returncode not in (0, None)


def test_a_corrupt_cache_file_is_a_miss(base_env: dict[str, str], tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    first, _ = _probe(base_env, cache)
    files = list((cache / "link").glob("*.json"))
    assert len(files) == 1
    files[0].write_text('{"schema": 1, "key": "trunc')
    again, _ = _probe(base_env, cache)
    assert again.cached is False
    assert again.cuda.status == first.cuda.status


def test_libcudart_only_in_lib_is_not_found_and_the_lib_dir_fix_works(
    base_env: dict[str, str], tmp_path: Path
) -> None:
    real = next(
        (
            c.path
            for c in libcuda.find_candidates(toolchain.probe(base_env), base_env)
            if c.library == "cudart" and c.linkable
        ),
        None,
    )
    if real is None:
        pytest.skip("no libcudart.so on this machine")
    pip_home = tmp_path / "cuda"  # pip-style layout: lib/, no lib64
    (pip_home / "lib").mkdir(parents=True)
    (pip_home / "lib" / "libcudart.so").symlink_to(real)
    env = {**base_env, "CUDA_HOME": str(pip_home)}
    link, findings = _probe(env)
    assert link.cudart.status == "missing"
    assert "cannot find -lcudart" in link.cudart.output

    finding = _finding(findings, "link-missing-libcudart")
    ldflags_fix = [f.command for f in finding.fixes if f.command and "FLASHINFER_EXTRA_LDFLAGS" in f.command]
    assert ldflags_fix and f"-L{pip_home}/lib" in ldflags_fix[0]
    fixed, _ = _probe(_apply(ldflags_fix[0], env))
    assert fixed.cudart.ok, fixed.cudart.output


def test_no_compiler_is_a_fact_not_an_exception(base_env: dict[str, str]) -> None:
    link, _ = _probe({**base_env, "CXX": "/nonexistent/bin/g++"})
    assert link.error is not None and "/nonexistent/bin/g++" in link.error
    assert (link.cuda.status, link.cudart.status) == ("not-run", "not-run")


def test_a_classified_link_log_gets_the_same_filled_fix_from_the_facts(
    base_env: dict[str, str], tmp_path: Path, stub_libcuda_builder: Callable[..., Path]
) -> None:
    from jitguard.findings.classify import classify

    conda = tmp_path / "conda"
    stub_dir = stub_libcuda_builder(conda / "lib" / "stubs", layout="driver")
    env = {**base_env, "CONDA_PREFIX": str(conda)}
    tc = toolchain.probe(env)
    facts = SimpleNamespace(toolchain=tc, link=libcuda.probe(tc, env), libstdcxx=libstdcxx.probe(tc, env))
    log = f"{facts.link.cuda.command_line}\n{facts.link.cuda.output}"

    params = toolchain_fixes.params_for("link-missing-libcuda", facts)  # type: ignore[arg-type]
    classified = classify(log, 1, **params)
    finding = _finding(classified, "link-missing-libcuda")
    assert (
        finding.fixes[0].command
        == f'export FLASHINFER_EXTRA_LDFLAGS="$FLASHINFER_EXTRA_LDFLAGS -L{stub_dir}"'
    )
