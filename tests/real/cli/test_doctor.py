"""`jitguard doctor` end to end, in a subprocess, on this machine's real facts (no GPU, no libcuda)."""

from __future__ import annotations

import copy
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

from envelope_schemas import assert_rejected, assert_valid


def doctor(*args: str, env: dict[str, str] | None = None, cache: Path) -> subprocess.CompletedProcess[str]:
    full_env = {**os.environ, "JITGUARD_CACHE_DIR": str(cache), **(env or {})}
    full_env.pop("NO_COLOR", None) if env is None or "NO_COLOR" not in env else None
    return subprocess.run(
        [sys.executable, "-m", "jitguard", "doctor", *args],
        capture_output=True,
        text=True,
        env=full_env,
        timeout=120,
    )


def doctor_json(*args: str, env: dict[str, str] | None = None, cache: Path) -> tuple[dict[str, Any], int]:
    proc = doctor("--json", *args, env=env, cache=cache)
    assert "Traceback" not in proc.stderr, proc.stderr
    return json.loads(proc.stdout), proc.returncode


def codes(data: dict[str, Any], backend: str) -> list[str]:
    return [f["code"] for f in data["backends"][backend]["findings"]]


def test_flashinfer_verdict_names_libcuda_with_the_real_linker_line(tmp_path: Path) -> None:
    data, rc = doctor_json("--backend", "flashinfer", cache=tmp_path)
    assert rc == 1
    assert data["schema"] == "jitguard.doctor/1"
    assert data["backends"]["flashinfer"]["usable"] is False
    libcuda = next(
        f for f in data["backends"]["flashinfer"]["findings"] if f["code"] == "link-missing-libcuda"
    )
    assert any("-lcuda" in e and "-shared" in e for e in libcuda["evidence"]), libcuda["evidence"]
    assert any("cannot find -lcuda" in e for e in libcuda["evidence"]), libcuda["evidence"]
    assert libcuda["fixes"]


def test_following_the_libcuda_fix_clears_the_finding(tmp_path: Path, stub_libcuda_dir: Path) -> None:
    data, _ = doctor_json(
        "--backend", "flashinfer", env={"FLASHINFER_EXTRA_LDFLAGS": f"-L{stub_libcuda_dir}"}, cache=tmp_path
    )
    assert "link-missing-libcuda" not in codes(data, "flashinfer")
    assert data["facts"]["link"]["cuda_links"] is True


def test_torch_backend_is_always_usable_here(tmp_path: Path) -> None:
    data, rc = doctor_json("--backend", "torch", cache=tmp_path)
    assert rc == 0
    assert data["backends"]["torch"]["usable"] is True


def test_human_report_ends_with_the_verdict_per_backend(tmp_path: Path) -> None:
    proc = doctor(cache=tmp_path)
    assert proc.returncode == 1
    verdict = proc.stdout[proc.stdout.index("Verdict") :]
    for backend in ("flashinfer", "triton", "torch"):
        assert backend in verdict
    assert "link-missing-libcuda" in verdict
    assert "flashinfer: skipped" in verdict and "torch: chosen" in verdict  # the GDN decision trace
    assert "What to do" in proc.stdout


def test_unknown_backend_is_a_usage_error_without_traceback(tmp_path: Path) -> None:
    proc = doctor("--backend", "cuda", cache=tmp_path)
    assert proc.returncode == 2
    assert "invalid choice: 'cuda'" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_compile_with_a_backend_that_compiles_nothing_is_a_usage_error(tmp_path: Path) -> None:
    proc = doctor("--backend", "triton", "--compile", cache=tmp_path)
    assert proc.returncode == 2
    assert "jitguard doctor --backend flashinfer --compile" in proc.stderr
    assert "Traceback" not in proc.stderr and proc.stdout == ""


def test_malformed_jitguard_variable_is_a_usage_error_naming_it(tmp_path: Path) -> None:
    proc = doctor(env={"JITGUARD_MEMORY_BUDGET": "lots"}, cache=tmp_path)
    assert proc.returncode == 2
    assert "JITGUARD_MEMORY_BUDGET='lots'" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_malformed_max_jobs_is_reported_not_crashed_on(tmp_path: Path) -> None:
    data, _ = doctor_json("--backend", "flashinfer", env={"MAX_JOBS": "abc"}, cache=tmp_path)
    assert "env-max-jobs-invalid" in codes(data, "flashinfer")


def test_unusable_cache_dir_is_a_finding_not_a_crash(tmp_path: Path) -> None:
    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("")
    data, _ = doctor_json(
        "--backend", "flashinfer", env={"FLASHINFER_WORKSPACE_BASE": str(not_a_dir)}, cache=tmp_path
    )
    assert "cache-dir-unwritable" in codes(data, "flashinfer")


def test_secrets_never_reach_the_json(tmp_path: Path) -> None:
    proc = doctor(
        "--json", env={"FLASHINFER_API_TOKEN": "s3cr3t-value", "HF_TOKEN": "hf_s3cr3t"}, cache=tmp_path
    )
    assert "s3cr3t" not in proc.stdout
    assert "FLASHINFER_API_TOKEN" in proc.stdout  # the name stays, the value goes


def test_no_color_is_respected_even_when_colour_is_forced(tmp_path: Path) -> None:
    forced = doctor(env={"FORCE_COLOR": "1", "TTY_COMPATIBLE": "1"}, cache=tmp_path)
    assert "\x1b[" in forced.stdout
    plain = doctor(env={"FORCE_COLOR": "1", "TTY_COMPATIBLE": "1", "NO_COLOR": "1"}, cache=tmp_path)
    assert "\x1b[" not in plain.stdout


def test_compile_runs_a_real_probe_build_that_passes_once_fixed(
    tmp_path: Path, stub_libcuda_dir: Path
) -> None:
    data, _ = doctor_json(
        "--backend",
        "flashinfer",
        "--compile",
        env={"FLASHINFER_EXTRA_LDFLAGS": f"-L{stub_libcuda_dir}", "CUDA_HOME": "/usr/local/cuda"},
        cache=tmp_path,
    )
    passed = [f for f in data["backends"]["flashinfer"]["findings"] if f["code"] == "compile-probe-passed"]
    assert passed and "built" in passed[0]["evidence"][0]


def bare_doctor(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """doctor in a real interpreter whose sys.path hides torch, FlashInfer and everything else installed:
    jitguard itself and its runtime dependencies only."""
    src = Path(__file__).resolve().parents[3] / "src"
    site = tmp_path / "site"
    site.mkdir()
    # jitguard's runtime dependencies and theirs, nothing else (filelock is not one: src never imports it).
    for name in ("psutil", "elftools", "packaging", "rich", "markdown_it", "mdurl", "pygments"):
        module = __import__(name)
        origin = Path(module.__file__).parent  # type: ignore[arg-type]
        (site / origin.name).symlink_to(origin)
    env = {
        "PYTHONPATH": f"{src}:{site}",
        "JITGUARD_CACHE_DIR": str(tmp_path / "cache"),
        "PATH": os.environ["PATH"],
        "NO_COLOR": "1",
    }
    proc = subprocess.run(
        [sys.executable, "-S", "-m", "jitguard", "doctor", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc


def test_without_torch_the_verdict_says_no_gdn_backend_can_run(tmp_path: Path) -> None:
    proc = bare_doctor(tmp_path)
    assert "torch-missing" in proc.stdout
    assert "no backend can run here" in proc.stdout


def test_compile_reports_what_the_probe_compiled_linked_and_loaded(tmp_path: Path) -> None:
    env = {"CUDA_HOME": "/usr/local/cuda-13.0", "NO_COLOR": "1"}
    text = doctor("--backend", "flashinfer", "--compile", env=env, cache=tmp_path).stdout
    probe = text[text.index("compile probe") : text.index("Verdict")]
    assert "compile probe  link failed (" in probe
    assert "compile  done     probe.cuda.o for sm_90a" in probe
    assert "link     failed   /usr/bin/ld: cannot find -lcuda" in probe  # the linker's own words
    assert "the link line asks for -lcudart -lcuda" in probe
    assert "load     not run  no library was built" in probe and "library  none built" in probe
    data, rc = doctor_json("--backend", "flashinfer", "--compile", env=env, cache=tmp_path)
    assert rc == 1
    assert_valid(data)
    steps = {s["name"]: s["outcome"] for s in data["compile_probe"]["steps"]}
    assert steps == {"compile": "done", "link": "failed", "check": "not-run", "load": "not-run"}
    assert data["compile_probe"]["link"]["libraries"] == ["cudart", "cuda"]
    assert Path(data["compile_probe"]["log_path"]).is_file()
    swapped = copy.deepcopy(data)
    probe_steps = swapped["compile_probe"]["steps"]
    probe_steps[0], probe_steps[1] = probe_steps[1], probe_steps[0]
    assert_rejected(swapped)  # the steps come in the order they run
    swapped["compile_probe"]["steps"] = data["compile_probe"]["steps"][:3]
    assert_rejected(swapped)  # every step is there, run or not


def test_compile_that_passes_reports_the_library_it_built(tmp_path: Path, stub_libcuda_dir: Path) -> None:
    env = {
        "FLASHINFER_EXTRA_LDFLAGS": f"-L{stub_libcuda_dir}",
        "CUDA_HOME": "/usr/local/cuda",
        "NO_COLOR": "1",
    }
    data, _ = doctor_json("--backend", "flashinfer", "--compile", env=env, cache=tmp_path)
    assert_valid(data)
    library = data["compile_probe"]["library"]
    assert library["bytes"] > 0 and library["kept"] is False and "libcuda.so.1" in library["needed"]
    text = doctor("--backend", "flashinfer", "--compile", env=env, cache=tmp_path).stdout
    assert "built and linked, not loaded: no NVIDIA driver here" in text
    assert re.search(
        r"library  /\S+/jitguard_compile_probe\.so, \d+ bytes, needs .*libcuda\.so\.1.* \(removed with the probe's",
        text,
    ), text


def test_compile_without_flashinfer_gives_complete_findings_and_says_whose_flags_it_used(
    tmp_path: Path,
) -> None:
    proc = bare_doctor(tmp_path, "--backend", "flashinfer", "--compile")
    assert "flashinfer-missing" in proc.stdout and "link-missing-libcudart" in proc.stdout
    assert "(unknown)" not in proc.stdout and not re.search(r"\{[a-z_]+\}", proc.stdout)
    assert "export CUDA_HOME=/usr/local/cuda-13.0" in proc.stdout  # this machine's fix, as pre-flight has it
    assert (
        "FlashInfer is not installed: the probe used the compile and link flags of FlashInfer's"
        in proc.stdout
    )
    assert "link     failed   /usr/bin/ld: cannot find -lcudart" in proc.stdout
