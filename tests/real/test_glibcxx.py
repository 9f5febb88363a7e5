"""A real GLIBCXX load fault, reproduced: a C++ module built here with g++ needs new GLIBCXX versions; a stub
libstdc++.so.6 (built with gcc and a linker version script) exports only older ones. The exact ELF check
predicts the loader's refusal before the load, the real loader refuses with `version `GLIBCXX_...' not
found`, the log classifier recognises that message, and the warning's LD_PRELOAD fix really makes the load
succeed."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from jitguard.facts import elf, libstdcxx, toolchain
from jitguard.findings import checks_toolchain
from jitguard.findings.checks_toolchain import check_built_library

pytestmark = pytest.mark.skipif(
    shutil.which("g++") is None or shutil.which("gcc") is None, reason="needs gcc/g++"
)

# std::to_chars(double) is versioned GLIBCXX_3.4.29 (GCC 11), condition_variable::wait GLIBCXX_3.4.30 (GCC
# 12).
MODULE_SOURCE = """
#include <charconv>
#include <condition_variable>
#include <mutex>
extern "C" int jg_format(double value, char* out, int size) {
    auto result = std::to_chars(out, out + size, value);
    return static_cast<int>(result.ptr - out);
}
extern "C" void jg_wait(std::condition_variable* cv, std::mutex* m) {
    std::unique_lock<std::mutex> lock(*m);
    cv->wait(lock);
}
"""
NEW_VERSIONS = ("GLIBCXX_3.4.29", "GLIBCXX_3.4.30")


def _run(argv: list[str], cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=120, check=False)


@pytest.fixture(scope="module")
def fault(tmp_path_factory: pytest.TempPathFactory) -> SimpleNamespace:
    """The module, the stub runtime dir, and the compiler's real libstdc++."""
    work = tmp_path_factory.mktemp("glibcxx")
    (work / "mod.cpp").write_text(MODULE_SOURCE)
    built = _run(["g++", "-std=c++17", "-shared", "-fPIC", "mod.cpp", "-o", "mod.so"], work)
    assert built.returncode == 0, built.stderr
    module = work / "mod.so"
    needs = elf.needed_versions(module).get("libstdc++.so.6", ())
    if not set(NEW_VERSIONS) <= set(needs):
        pytest.skip(f"this g++ links to_chars/condition_variable::wait with other versions: {needs}")

    real = Path(_run(["g++", "-print-file-name=libstdc++.so.6"], work).stdout.strip()).resolve()
    provided = elf.defined_versions(real)
    # The stub keeps every node of the real library older than GLIBCXX_3.4.29 (a GCC 10 libstdc++, in effect).
    keep = [v for v in provided if not (v.startswith("GLIBCXX_") and elf.version_tuple(v) >= (3, 4, 29))]
    (work / "stub.c").write_text(
        "".join(f"int jg_stub_{i}(void) {{ return {i}; }}\n" for i in range(len(keep)))
    )
    (work / "stub.map").write_text("".join(f"{v} {{ global: jg_stub_{i}; }};\n" for i, v in enumerate(keep)))
    stub_dir = work / "stub"
    stub_dir.mkdir()
    stub = _run(
        [
            "gcc",
            "-shared",
            "-fPIC",
            "-Wl,--version-script=stub.map",
            "-Wl,-soname,libstdc++.so.6",
            "stub.c",
            "-o",
            str(stub_dir / "libstdc++.so.6"),
        ],
        work,
    )
    assert stub.returncode == 0, stub.stderr
    return SimpleNamespace(work=work, module=module, stub_dir=stub_dir, real=real, needs=needs)


def _load(module: Path, **env_vars: str) -> subprocess.CompletedProcess[str]:
    """dlopen the module in a fresh interpreter (-S: no site hooks that might load a libstdc++ first)."""
    env = {k: v for k, v in os.environ.items() if k not in ("LD_LIBRARY_PATH", "LD_PRELOAD")}
    env.update(env_vars)
    code = f"import ctypes; ctypes.CDLL({str(module)!r})"
    return subprocess.run(
        [sys.executable, "-S", "-c", code], env=env, capture_output=True, text=True, timeout=60
    )


def _stub_env(fault: SimpleNamespace) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    env["LD_LIBRARY_PATH"] = str(fault.stub_dir)
    return env


def test_stub_libstdcxx_exports_only_older_glibcxx_versions(fault: SimpleNamespace) -> None:
    versions = elf.defined_versions(fault.stub_dir / "libstdc++.so.6")
    assert "GLIBCXX_3.4" in versions
    assert not set(NEW_VERSIONS) & set(versions)


def test_probe_picks_the_stub_as_runtime_libstdcxx_from_ld_library_path(fault: SimpleNamespace) -> None:
    facts = libstdcxx.probe(toolchain.probe(), _stub_env(fault))
    assert facts.runtime_lib == str((fault.stub_dir / "libstdc++.so.6").resolve())
    assert facts.runtime_source == "LD_LIBRARY_PATH"
    assert facts.runtime_max is not None and elf.version_tuple(facts.runtime_max) < (3, 4, 29)


def test_elf_check_predicts_the_exact_missing_versions_and_the_loader_agrees(fault: SimpleNamespace) -> None:
    runtime = libstdcxx.probe(toolchain.probe(), _stub_env(fault))

    predicted = check_built_library(fault.module, runtime)  # before any load

    assert [f.code for f in predicted] == ["so-glibcxx-missing"]
    missing_line = [e for e in predicted[0].evidence if e.startswith("missing: ")]
    assert missing_line == [f"missing: {', '.join(NEW_VERSIONS)}"]
    assert all(v in predicted[0].title for v in NEW_VERSIONS)

    loaded = _load(fault.module, LD_LIBRARY_PATH=str(fault.stub_dir))
    assert loaded.returncode != 0
    assert "not found" in loaded.stderr
    reported = [v for v in NEW_VERSIONS if f"version `{v}' not found" in loaded.stderr]
    assert reported, loaded.stderr  # the loader names (one of) exactly the versions predicted


def test_module_loads_and_check_is_clean_with_the_compilers_own_libstdcxx(fault: SimpleNamespace) -> None:
    runtime = libstdcxx.for_library(str(fault.real))
    assert check_built_library(fault.module, runtime) == []
    assert _load(fault.module).returncode == 0


def test_classify_recognises_the_real_loader_error(fault: SimpleNamespace) -> None:
    if not (Path(checks_toolchain.__file__).parent / "classify.py").exists():
        pytest.skip("jitguard.findings.classify is not written yet")
    from jitguard.findings.classify import classify

    loaded = _load(fault.module, LD_LIBRARY_PATH=str(fault.stub_dir))
    findings = classify(loaded.stderr, loaded.returncode)
    assert [f.code for f in findings] == ["so-glibcxx-missing"]
    assert any(v in " ".join(findings[0].evidence) for v in NEW_VERSIONS)


def test_runtime_older_warning_and_its_ld_preload_fix_makes_the_load_succeed(fault: SimpleNamespace) -> None:
    env = _stub_env(fault)
    tc = toolchain.probe(env)
    lib = libstdcxx.probe(tc, env)
    assert lib.runtime_older
    assert set(NEW_VERSIONS) <= set(lib.missing_in_runtime)

    warnings = checks_toolchain.check(_facts(tc, lib), "flashinfer")
    older = [f for f in warnings if f.code == "libstdcxx-runtime-older"]
    assert len(older) == 1 and older[0].severity == "warning"
    preload = [f.command for f in older[0].fixes if f.command and f.command.startswith("export LD_PRELOAD=")]
    assert preload == [f"export LD_PRELOAD={lib.compiler_lib}"]

    fixed = _load(fault.module, LD_LIBRARY_PATH=str(fault.stub_dir), LD_PRELOAD=preload[0].split("=", 1)[1])
    assert fixed.returncode == 0, fixed.stderr


def test_a_prebuilt_module_is_checked_exactly_instead_of_the_toolchain(fault: SimpleNamespace) -> None:
    env = {**_stub_env(fault), "PATH": str(fault.work / "no-tools"), "CXX": "/nonexistent/c++"}
    tc = toolchain.probe(env)
    facts = _facts(tc, libstdcxx.probe(tc, env))
    facts.flashinfer.prebuilt_gdn = fault.module
    findings = checks_toolchain.check(facts, "flashinfer")
    assert [f.code for f in findings] == ["so-glibcxx-missing"]  # no compiler needed, but the load would fail


def test_probe_on_this_machine_reads_the_compilers_libstdcxx_versions() -> None:
    tc = toolchain.probe()
    lib = libstdcxx.probe(tc)
    assert lib.compiler_lib is not None
    assert lib.compiler_max == elf.max_version(elf.defined_versions(lib.compiler_lib), "GLIBCXX")
    assert lib.runtime_lib is not None and lib.runtime_source != "none"


def _facts(tc: toolchain.ToolchainFacts, lib: libstdcxx.LibstdcxxFacts) -> SimpleNamespace:
    """Real toolchain and libstdc++ facts; the link trial is irrelevant here, so it is one that passed."""
    from jitguard.facts import libcuda

    ok = libcuda.LinkTrial(
        library="cuda", status="ok", command=(), returncode=0, output="", library_path=None
    )
    link = libcuda.LinkFacts(
        cxx=(),
        cuda_home=None,
        ldflags=(),
        extra_ldflags=(),
        extra_ldflags_warning=None,
        library_path=None,
        cudart=ok,
        cuda=ok,
        candidates=(),
        fingerprint="",
        cached=False,
        error=None,
        cudart_links=True,
        cuda_links=True,
    )
    return SimpleNamespace(toolchain=tc, link=link, libstdcxx=lib, flashinfer=SimpleNamespace(era="nvcc"))
