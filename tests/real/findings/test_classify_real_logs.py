"""classify() on logs produced here by the real toolchain: the linker, g++, the assembler, the kernel's limits."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from jitguard.findings.classify import classify


def _run(cmd: list[str], cwd: Path) -> tuple[str, int]:
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
    # ninja -v prints the command before its output; the classifier relies on that for link evidence.
    return " ".join(cmd) + "\n" + proc.stdout + proc.stderr, proc.returncode


def _codes(findings: list) -> list[str]:
    return [f.code for f in findings]


def test_real_link_without_libcuda_is_link_missing_libcuda(tmp_path: Path) -> None:
    (tmp_path / "a.cc").write_text("int f() { return 0; }\n")
    log, rc = _run(
        [
            "c++",
            "a.cc",
            "-shared",
            "-o",
            "a.so",
            "-L/nonexistent/lib64",
            "-L/nonexistent/lib64/stubs",
            "-lcuda",
        ],
        tmp_path,
    )
    assert rc != 0
    findings = classify(log, rc)
    assert _codes(findings) == ["link-missing-libcuda"]
    evidence = findings[0].evidence
    assert any("-lcuda" in line and "-shared" in line for line in evidence), evidence  # the linker line
    assert any("cannot find -lcuda" in line for line in evidence), evidence
    assert findings[0].severity == "error"
    assert findings[0].fixes


def test_real_link_without_libcudart_is_not_mistaken_for_libcuda(tmp_path: Path) -> None:
    (tmp_path / "a.cc").write_text("int f() { return 0; }\n")
    log, rc = _run(["c++", "a.cc", "-shared", "-o", "a.so", "-L/nonexistent", "-lcudart"], tmp_path)
    assert _codes(classify(log, rc)) == ["link-missing-libcudart"]


def test_real_missing_cuda_header_is_classified_with_the_header(tmp_path: Path) -> None:
    (tmp_path / "h.cc").write_text("#include <cuda_runtime.h>\nint x;\n")
    log, rc = _run(["c++", "-nostdinc++", "-c", "h.cc", "-o", "h.o"], tmp_path)
    findings = classify(log, rc)
    assert _codes(findings) == ["cuda-headers-missing"]
    assert any("cuda_runtime.h" in line for line in findings[0].evidence)


def test_real_no_space_left_is_disk_full(tmp_path: Path) -> None:
    (tmp_path / "a.cc").write_text("int f() { return 0; }\n")
    log, rc = _run(["c++", "-c", "a.cc", "-o", "/dev/full"], tmp_path)
    assert rc != 0
    assert "disk-full" in _codes(classify(log, rc))


def test_real_compiler_out_of_memory_is_oom(tmp_path: Path) -> None:
    src = tmp_path / "big.cc"
    src.write_text(
        "#include <map>\n#include <string>\n#include <vector>\nstd::map<std::string, std::vector<int>> m;\n"
    )
    # An address-space limit makes cc1plus fail its allocations the way a memory-starved compile does.
    for limit_mb in (60, 70, 80):
        log, rc = _run(
            ["prlimit", f"--as={limit_mb * 1_000_000}", "c++", "-c", "big.cc", "-o", "big.o"], tmp_path
        )
        if "memory exhausted" in log or "out of memory" in log:
            break
    else:
        pytest.skip("could not make cc1plus run out of memory with prlimit on this machine")
    assert "build-oom-killed" in _codes(classify(log, rc))


def test_real_sigkilled_process_is_oom_even_without_text(tmp_path: Path) -> None:
    proc = subprocess.run(["bash", "-c", "kill -9 $$"], capture_output=True, text=True)
    assert proc.returncode == -9
    findings = classify(proc.stdout + proc.stderr, proc.returncode)
    assert _codes(findings) == ["build-oom-killed"]


def test_real_success_has_no_findings(tmp_path: Path) -> None:
    (tmp_path / "a.cc").write_text("int f() { return 0; }\n")
    log, rc = _run(["c++", "-c", "a.cc", "-o", "a.o"], tmp_path)
    assert rc == 0
    assert classify(log, rc) == []


def test_real_unknown_compile_error_is_build_failed_with_the_error_line(tmp_path: Path) -> None:
    (tmp_path / "bad.cc").write_text("int f() { return undeclared_thing; }\n")
    log, rc = _run(["c++", "-c", "bad.cc", "-o", "bad.o"], tmp_path)
    findings = classify(log, rc, log_path="/tmp/build.log")
    assert _codes(findings) == ["build-failed"]
    assert any("undeclared_thing" in line for line in findings[0].evidence)
