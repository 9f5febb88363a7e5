"""The GPU arch x CUDA toolkit verdict with the real tools: nvcc 13.0 here, a real older nvcc (Debian's CUDA
11.8 toolkit package: PyPI's nvidia-cuda-nvcc-cu12 wheels ship ptxas but no nvcc), FlashInfer 0.6.6's own
target-list code, FlashInfer 0.6.18's refusal of SM 12.x below CUDA 12.9, real nvcc error lines, and
`jitguard doctor --json`.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from filelock import FileLock

from jitguard.facts import cuda_archs, flashinfer_archs, toolchain
from jitguard.findings.classify import classify
from release_preparation import CI_ROOT

SRC = Path(__file__).resolve().parents[2] / "src"
ROOT = Path(os.environ.get("JITGUARD_FLASHINFER_ROOT") or CI_ROOT)
NVCC_13 = Path("/usr/local/cuda-13.0/bin/nvcc")
OLD_NVCC_HOME = ROOT / "nvcc-11.8" / "usr" / "lib" / "nvidia-cuda-toolkit"
APT_SOURCES = (Path("/etc/apt/sources.list.d/debian.sources"), Path("/etc/apt/sources.list"))
TINY_CU = "__global__ void k(int *p) { *p = 1; }\n"

needs_nvcc_13 = pytest.mark.skipif(not NVCC_13.is_file(), reason=f"{NVCC_13} is not installed")


def _unavailable(message: str) -> None:
    if os.environ.get("CI") == "true":
        pytest.fail(message)
    pytest.skip(message)


def _debian_non_free() -> str | None:
    """A one-line apt source for the non-free component of the Debian mirror and suite this machine's apt is
    set up with (deb822 ``debian.sources`` or ``sources.list``); None when there is none."""
    for path in APT_SOURCES:
        try:
            text = path.read_text()
        except OSError:
            continue
        if path.suffix == ".sources":
            for stanza in text.split("\n\n"):
                fields = dict(
                    line.split(":", 1)
                    for line in stanza.splitlines()
                    if ":" in line and not line.startswith("#")
                )
                uris, suites = fields.get("URIs", "").split(), fields.get("Suites", "").split()
                if uris and suites and not suites[0].endswith("-security"):
                    return f"deb {uris[0]} {suites[0]} non-free\n"
        for line in text.splitlines():
            parts = line.split()
            if len(parts) >= 3 and parts[0] == "deb" and "security" not in parts[2]:
                return f"deb {parts[1]} {parts[2]} non-free\n"
    return None


def _fetch_old_nvcc(target: Path) -> str | None:
    """Debian bookworm's nvidia-cuda-toolkit (CUDA 11.8) unpacked into ``target``; the error, else None. apt
    runs with a private source list and state directory, so the machine's own apt setup is left alone."""
    if shutil.which("apt-get") is None or shutil.which("dpkg-deb") is None:
        return "apt-get or dpkg-deb is not on PATH"
    work = target.with_name(target.name + ".partial")
    shutil.rmtree(work, ignore_errors=True)
    (work / "lists" / "partial").mkdir(parents=True)
    source = _debian_non_free()
    if source is None:
        return "this machine's apt has no Debian source to take the non-free component from"
    (work / "sources.list").write_text(source)
    options = [
        f"-oDir::Etc::SourceList={work / 'sources.list'}",
        "-oDir::Etc::SourceParts=/dev/null",
        f"-oDir::State::Lists={work / 'lists'}",
        f"-oDir::Cache={work / 'cache'}",
    ]
    for argv in (["apt-get", *options, "update"], ["apt-get", *options, "download", "nvidia-cuda-toolkit"]):
        proc = subprocess.run(
            argv, cwd=work, capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL
        )
        if proc.returncode != 0:
            return f"`{' '.join(argv[:1] + argv[-2:])}` failed: {(proc.stdout + proc.stderr)[-2000:]}"
    debs = sorted(work.glob("nvidia-cuda-toolkit_*.deb"))
    if not debs:
        return "apt-get download left no nvidia-cuda-toolkit .deb"
    subprocess.run(["dpkg-deb", "-x", str(debs[0]), str(work / "root")], check=True, timeout=600)
    shutil.rmtree(target, ignore_errors=True)
    (work / "root").rename(target)
    shutil.rmtree(work, ignore_errors=True)
    return None


@pytest.fixture(scope="module")
def old_nvcc_home() -> Path:
    """A real CUDA 11.8 nvcc (its toolkit dir: bin/nvcc), fetched once into the test cache."""
    ROOT.mkdir(parents=True, exist_ok=True)
    with FileLock(str(ROOT / "nvcc-11.8.lock"), timeout=900):
        if not (OLD_NVCC_HOME / "bin" / "nvcc").is_file():
            error = _fetch_old_nvcc(ROOT / "nvcc-11.8")
            if error is not None:
                _unavailable(f"could not fetch Debian's CUDA 11.8 nvcc: {error}")
    return OLD_NVCC_HOME


def _probe(cuda_home: Path) -> toolchain.ToolchainFacts:
    return toolchain.probe({**os.environ, "CUDA_HOME": str(cuda_home)})


@needs_nvcc_13
def test_nvcc_13_lists_the_suffixed_blackwell_targets_and_no_volta() -> None:
    tc = _probe(NVCC_13.parent.parent)
    listed = [t.compute for t in cuda_archs.targets_of(tc.nvcc_gpu_archs)]
    assert tc.nvcc_release == (13, 0)
    assert {
        "compute_90a",
        "compute_100a",
        "compute_103a",
        "compute_120a",
        "compute_120f",
        "compute_121f",
    } <= set(listed)
    assert "compute_70" not in listed and "compute_72" not in listed
    assert listed == list(cuda_archs.table_targets((13, 0))), "the release table disagrees with nvcc 13.0"


def test_nvcc_11_8_lists_volta_and_nothing_blackwell(old_nvcc_home: Path) -> None:
    tc = _probe(old_nvcc_home)
    listed = [t.compute for t in cuda_archs.targets_of(tc.nvcc_gpu_archs)]
    assert tc.nvcc_release == (11, 8)
    assert "compute_70" in listed and "compute_90" in listed
    assert not {"compute_90a", "compute_100a", "compute_120", "compute_120f"} & set(listed)
    assert listed == list(cuda_archs.table_targets((11, 8))), "the release table disagrees with nvcc 11.8"


FLAGS_SCRIPT = r"""
import json, sys
from flashinfer.compilation_context import CompilationContext
ctx = CompilationContext()
out = {"global": [f for f in ctx.get_nvcc_flags_list() if f.startswith("-gencode")]}
for name, majors in (("moe12", [12]), ("moe10", [10, 11])):
    try:
        out[name] = [f for f in ctx.get_nvcc_flags_list(supported_major_versions=majors) if f.startswith("-gencode")]
    except RuntimeError as exc:
        out[name] = str(exc)
print("RESULT " + json.dumps(out))
"""


def _run_python(script: str, env: dict[str, str], path: list[Path]) -> dict[str, Any]:
    full = {**os.environ, **env, "PYTHONPATH": os.pathsep.join(str(p) for p in path)}
    proc = subprocess.run(
        [sys.executable, "-c", script], env=full, capture_output=True, text=True, timeout=300, cwd="/"
    )
    line = next((x for x in proc.stdout.splitlines() if x.startswith("RESULT ")), None)
    assert line is not None, proc.stdout + proc.stderr
    return json.loads(line.removeprefix("RESULT "))  # type: ignore[no-any-return]


@pytest.mark.parametrize("arch_list", ["7.0", "12.0f", "10.0a", "8.0 9.0a 12.0f"])
def test_flashinfer_066_asks_nvcc_for_what_jitguard_says(arch_list: str, tmp_path: Path) -> None:
    """FlashInfer 0.6.6's real CompilationContext against jitguard's re-derivation, for the global list and
    the fused-MoE module families."""
    import importlib.metadata

    try:  # not imported here: FlashInfer in this process would shadow other tests' stand-in packages
        version = importlib.metadata.version("flashinfer-python")
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("flashinfer-python is not installed")
    real = _run_python(
        FLAGS_SCRIPT, {"FLASHINFER_CUDA_ARCH_LIST": arch_list, "FLASHINFER_WORKSPACE_BASE": str(tmp_path)}, []
    )
    plan = flashinfer_archs.plan(version, arch_list, (), (13, 0))
    assert plan is not None
    assert real["global"] == [t.gencode for t in plan.targets]
    for name, device in (("moe12", (12, 0)), ("moe10", (10, 0))):
        ours = [t.gencode for t in flashinfer_archs.fused_moe_targets(plan, *device)]
        if ours:
            assert real[name] == ours, (name, real)
        else:  # FlashInfer: "No supported CUDA architectures found for major versions [...]"
            assert isinstance(real[name], str) and "No supported CUDA architectures" in real[name], real


def test_flashinfer_0618_refuses_sm120_below_cuda_12_9_as_jitguard_says(
    old_nvcc_home: Path, tmp_path: Path
) -> None:
    """The #50705 cause: FlashInfer 0.6.18 asks its CUDA_HOME's nvcc (11.8 here) for its release and refuses
    an unsuffixed 12.0; jitguard's plan says the same, and its pre-flight names the code."""
    target = ROOT / "flashinfer-0.6.18"
    if not (target / "flashinfer" / "compilation_context.py").is_file():
        _unavailable(f"{target} is not prepared (tests/real/test_flashinfer_cutedsl_era.py installs it)")
    env = {
        "FLASHINFER_CUDA_ARCH_LIST": "12.0",
        "CUDA_HOME": str(old_nvcc_home),
        "FLASHINFER_WORKSPACE_BASE": str(tmp_path),
    }
    script = (
        "import json\ntry:\n    from flashinfer.compilation_context import CompilationContext\n"
        "    CompilationContext(); r = None\nexcept RuntimeError as exc:\n    r = str(exc)\n"
        "print('RESULT ' + json.dumps({'error': r}))\n"
    )
    real = _run_python(script, env, [target])
    plan = flashinfer_archs.plan("0.6.18", "12.0", (), (11, 8))
    assert plan is not None and real["error"] in plan.refusals
    verdict = _run_python(PREFLIGHT_SCRIPT, env, [SRC, target])
    assert verdict["codes"].count("nvcc-arch-unsupported") == 1, verdict
    assert "SM 12.x requires CUDA >= 12.9" in verdict["causes"][0]


PREFLIGHT_SCRIPT = r"""
import json
from jitguard.facts import collect
from jitguard.findings.checks import preflight
found = [f for f in preflight(collect(), "flashinfer") if f.code == "nvcc-arch-unsupported"]
print("RESULT " + json.dumps({"codes": [f.code for f in found], "causes": [f.cause for f in found],
                              "fixes": [[x.command for x in f.fixes] for f in found]}))
"""


def _compile(nvcc: Path, gencode: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    source = tmp_path / "tiny.cu"
    source.write_text(TINY_CU)
    return subprocess.run(
        [str(nvcc), gencode, "-c", str(source), "-o", str(tmp_path / "tiny.o")],
        capture_output=True,
        text=True,
        timeout=300,
    )


@needs_nvcc_13
def test_a_real_nvcc_13_volta_failure_is_classified_with_the_code(tmp_path: Path) -> None:
    proc = _compile(NVCC_13, "-gencode=arch=compute_70,code=sm_70", tmp_path)
    assert proc.returncode != 0
    assert "Unsupported gpu architecture 'compute_70'" in proc.stderr
    found = classify(proc.stdout + proc.stderr, proc.returncode)
    assert [f.code for f in found] == ["nvcc-arch-unsupported"]
    assert "compute_70" in found[0].title
    assert any("Unsupported gpu architecture" in e for e in found[0].evidence)


def test_a_real_old_nvcc_rejecting_sm_120f_is_classified_with_the_code(
    old_nvcc_home: Path, tmp_path: Path
) -> None:
    proc = _compile(old_nvcc_home / "bin" / "nvcc", "-arch=sm_120f", tmp_path)
    assert "Value 'sm_120f' is not defined for option 'gpu-architecture'" in proc.stderr
    found = classify(proc.stdout + proc.stderr, proc.returncode)
    assert [f.code for f in found] == ["nvcc-arch-unsupported"]
    assert "sm_120f" in found[0].title


@needs_nvcc_13
def test_doctor_json_names_the_volta_target_nvcc_13_cannot_build_without_compile(tmp_path: Path) -> None:
    env = {
        **os.environ,
        "PYTHONPATH": str(SRC),
        "JITGUARD_CACHE_DIR": str(tmp_path / "cache"),
        "FLASHINFER_CUDA_ARCH_LIST": "7.0",
        "CUDA_HOME": str(NVCC_13.parent.parent),
    }
    proc = subprocess.run(
        [sys.executable, "-m", "jitguard", "doctor", "--json", "--backend", "flashinfer"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    data = json.loads(proc.stdout)
    found = [f for f in data["backends"]["flashinfer"]["findings"] if f["code"] == "nvcc-arch-unsupported"]
    assert len(found) == 1, data["backends"]["flashinfer"]["findings"]
    assert "compute_70" in found[0]["title"]
    assert any(str(NVCC_13) in e and "13.0" in e for e in found[0]["evidence"])
    # FlashInfer builds nothing for a list without sm75+: no toolkit is offered, the engine's own path is.
    assert [x["command"] for x in found[0]["fixes"]] == ["export VLLM_USE_FLASHINFER_SAMPLER=0"]
