"""The real flashinfer-python of the CuTeDSL era (0.6.18, and 0.7.4: the newest) on this GPU-less machine,
through jitguard's public pieces; every test runs once per release.

Each release is installed with ``pip install --no-deps --target`` into a cached directory that shadows the
system FlashInfer (0.6.6 here) on PYTHONPATH; every check runs in a subprocess with that environment. What the
real package does here depends on the torch that pip chose, and the tests read which one it is:
- 0.6.18 with the CPU build: ``import flashinfer.gdn_prefill`` raises ``AssertionError: Torch not compiled with
  CUDA enabled`` from a module-level ``torch.cuda.get_device_properties(0)`` in
  ``flashinfer/gdn_kernels/gdn_decode_bf16_state.py`` (FlashInfer only catches ImportError and RuntimeError
  there), so ``import flashinfer`` fails as a whole;
- 0.6.18 with the CUDA build (no driver here): that query raises ``RuntimeError: Found no NVIDIA driver ...``,
  which FlashInfer catches, so the import works and the first device query after it fails;
- 0.7.4 makes no device query at import: it imports with either build (observed), and the first device query
  after it fails.
With those device queries answered as an H200 would, each imports with the real nvidia-cutlass-dsl 4.8.1;
without the DSL it fails on ``import cutlass``. The DSL is made older by a shadowing dist-info, and absent by
``python -S`` over a copy of site-packages without it.
"""

from __future__ import annotations

import json
import shutil
import site
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from flashinfer_releases import TINY_KERNEL, prepared, release_dir
from flashinfer_releases import release_env as _env

SRC = Path(__file__).resolve().parents[2] / "src"


@dataclass(frozen=True)
class Release:
    version: str
    dsl_floor: str  # its Requires-Dist on nvidia-cutlass-dsl
    # What ``import flashinfer.gdn_prefill`` does here, by torch build (observed; see the module docstring).
    expected_import: dict[str, dict[str, Any]]

    @property
    def target(self) -> Path:
        return release_dir(self.version)


RELEASES = (
    Release(
        "0.6.18",
        ">=4.6.2a0",
        {
            "cpu": {"ok": False, "type": "AssertionError", "message": "Torch not compiled with CUDA enabled"},
            "cuda": {"ok": True},
        },
    ),
    Release("0.7.4", ">=4.8.0", {"cpu": {"ok": True}, "cuda": {"ok": True}}),
)
TOOLCHAIN_AREA = "toolchain"

# Facts and pre-flight, as `jitguard doctor` computes them, plus what the toolchain checks alone say and what
# they would say on this machine if the era were nvcc (the contrast that makes "none" mean something).
FACTS_SCRIPT = r"""
import dataclasses, importlib.metadata, importlib.util, json
from jitguard.facts import collect
from jitguard.facts.serialize import facts_to_json
from jitguard.findings import checks_toolchain
from jitguard.findings.catalog import CATALOG
from jitguard.findings.checks import preflight

facts = collect()
nvcc_era = dataclasses.replace(
    facts, flashinfer=dataclasses.replace(facts.flashinfer, era="nvcc", gdn_module="gdn_prefill_sm90")
)
print("RESULT " + json.dumps({
    "metadata_version": importlib.metadata.version("flashinfer-python"),
    "flashinfer_origin": importlib.util.find_spec("flashinfer").origin,
    "torch_flavour": facts.packages.torch_flavour,
    "flashinfer": facts_to_json(facts)["flashinfer"],
    "findings": [
        {**f.to_json(), "area": CATALOG[f.code].area} for f in preflight(facts, "flashinfer")
    ],
    "toolchain_check": [f.code for f in checks_toolchain.check(facts, "flashinfer")],
    "toolchain_check_if_nvcc_era": [f.code for f in checks_toolchain.check(nvcc_era, "flashinfer")],
}))
"""

# The import with no jitguard involved, then torch's own device query: the ground truth jitguard's reports are
# compared with.
RAW_IMPORT_SCRIPT = r"""
import importlib, json

def attempt(call):
    try:
        call()
        return {"ok": True}
    except BaseException as exc:
        return {"ok": False, "type": type(exc).__name__, "message": str(exc)}

result = attempt(lambda: importlib.import_module("flashinfer.gdn_prefill"))
import torch
result["device_query"] = attempt(torch.cuda.get_device_capability)
result["torch_build"] = "cuda" if torch.version.cuda else "rocm" if torch.version.hip else "cpu"
print("RESULT " + json.dumps(result))
"""

# The GDN backend's own load(), and the finding the resolver makes of its failure.
BACKEND_LOAD_SCRIPT = r"""
import json
from jitguard.gdn.backends import flashinfer as backend
from jitguard.findings.classify import classify_exception
try:
    backend.load()
    result = {"ok": True}
except Exception as exc:
    head = classify_exception(backend.NAME, backend.TITLE, "load", exc, alternative="torch")[0]
    result = {"ok": False, "type": type(exc).__name__, "message": str(exc), "finding": head.to_json()}
print("RESULT " + json.dumps(result))
"""


# The device queries FlashInfer 0.6.18 makes at import (0.7.4 makes none) and jitguard's _check_dsl_kernel makes, answered as
# an H200 would (there is no GPU here); everything else (FlashInfer, the DSL, jitguard) is the real code.
H200_LOAD_SCRIPT = (
    r"""
import types, torch
torch.cuda.get_device_properties = lambda *a, **k: types.SimpleNamespace(multi_processor_count=132)
torch.cuda.get_device_capability = lambda *a, **k: (9, 0)
"""
    + BACKEND_LOAD_SCRIPT
)


@pytest.fixture(scope="module", params=RELEASES, ids=[r.version for r in RELEASES])
def release(request: pytest.FixtureRequest) -> Release:
    return request.param  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def target(release: Release) -> Path:
    """The cached --target directory holding the release (installed on first use)."""
    return prepared(release.version)


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory, release: Release) -> Path:
    return tmp_path_factory.mktemp(f"flashinfer-cutedsl-{release.version}")


Ran = tuple[int, str, str]  # exit status, stdout, stderr


def _start(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, *args],
        env=env,
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
    )


def _finish(proc: subprocess.Popen[str]) -> Ran:
    try:
        out, err = proc.communicate(timeout=300)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
    return proc.returncode, out, err


def _python(args: list[str], env: dict[str, str], cwd: Path) -> Ran:
    return _finish(_start(args, env, cwd))


def _result(ran: Ran) -> dict[str, Any]:
    code, out, err = ran
    results = [line for line in out.splitlines() if line.startswith("RESULT ")]
    assert code == 0 and results, f"exit {code}:\n{(out + err)[-6000:]}"
    return dict(json.loads(results[-1][len("RESULT ") :]))


def _envelope(ran: Ran) -> tuple[int, Any]:
    code, out, err = ran
    assert code in (0, 1), f"exit {code}:\n{(out + err)[-6000:]}"
    assert "Traceback" not in err, err[-6000:]
    return code, json.loads(out)


def _doctor_args(*extra: str, flags: tuple[str, ...] = ()) -> list[str]:
    return [*flags, "-m", "jitguard", "doctor", "--backend", "flashinfer", "--json", *extra]


def _only(findings: list[dict[str, Any]], code: str) -> dict[str, Any]:
    matching = [f for f in findings if f["code"] == code]
    assert len(matching) == 1, [f["code"] for f in findings]
    return matching[0]


def _commands(finding: dict[str, Any]) -> list[str]:
    return [fix["command"] for fix in finding["fixes"] if fix.get("command")]


@pytest.fixture(scope="module")
def report(target: Path, workdir: Path) -> dict[str, Any]:
    return _result(_python(["-c", FACTS_SCRIPT], _env(workdir, target, SRC), workdir))


@pytest.fixture(scope="module")
def fake_site(workdir: Path) -> Path:
    return _site_without_the_dsl(workdir / "site-without-dsl")


@pytest.fixture(scope="module")
def importing(target: Path, workdir: Path, fake_site: Path) -> dict[str, Ran]:
    """The runs that import flashinfer (seconds each, mostly torch), started together."""
    env = _env(workdir, target, SRC)
    without_dsl = _env(workdir, target, SRC, fake_site)
    started = {
        "raw": _start(["-c", RAW_IMPORT_SCRIPT], env, workdir),
        "load": _start(["-c", BACKEND_LOAD_SCRIPT], env, workdir),
        "doctor": _start(_doctor_args("--deep"), env, workdir),
        "h200": _start(["-c", H200_LOAD_SCRIPT], env, workdir),
        "h200-without-dsl": _start(["-S", "-c", H200_LOAD_SCRIPT], without_dsl, workdir),
    }
    return {name: _finish(proc) for name, proc in started.items()}


@pytest.fixture(scope="module")
def raw_import(importing: dict[str, Ran]) -> dict[str, Any]:
    return _result(importing["raw"])


# ---- 1. facts and pre-flight ------------------------------------------------------------------------------
def test_the_target_directory_shadows_the_system_flashinfer(
    report: dict[str, Any], target: Path, release: Release
) -> None:
    assert report["metadata_version"] == release.version
    assert report["flashinfer_origin"] == str(target / "flashinfer" / "__init__.py")
    assert report["flashinfer"]["package_dir"] == str(target / "flashinfer")


def test_facts_say_cutedsl_era_with_no_nvcc_module(report: dict[str, Any], release: Release) -> None:
    fi = report["flashinfer"]
    assert (fi["installed"], fi["version"], fi["era"]) == (True, release.version, "cutedsl")
    assert fi["gdn_module"] is None
    assert fi["gdn_tu_count"] is None
    assert fi["prebuilt_gdn"] is None


def test_facts_read_the_real_dsl_floor_and_find_it_met(report: dict[str, Any], release: Release) -> None:
    from importlib import metadata

    fi = report["flashinfer"]
    assert fi["cutlass_dsl_requirement"] == release.dsl_floor
    assert fi["cutlass_dsl_version"] == metadata.version("nvidia-cutlass-dsl")  # the system's, 4.8.1 here
    assert fi["cutlass_dsl_satisfied"] is True


def test_preflight_says_every_process_compiles(report: dict[str, Any], release: Release) -> None:
    finding = _only(report["findings"], "flashinfer-cutedsl-compiles-per-process")
    assert finding["severity"] == "info"
    assert finding["evidence"] == [f"flashinfer-python {release.version} (CuTeDSL era: >= 0.6.14)"]


def test_preflight_has_no_toolchain_findings_in_the_cutedsl_era(report: dict[str, Any]) -> None:
    assert report["toolchain_check"] == []
    assert [f["code"] for f in report["findings"] if f["area"] == TOOLCHAIN_AREA] == []


def test_preflight_flashinfer_codes_are_exactly_the_era_and_torch_ones(report: dict[str, Any]) -> None:
    # System findings (no GPU here) are the system area's business; the package and toolchain ones are these.
    expected = {"flashinfer-cutedsl-compiles-per-process"}
    if report["torch_flavour"] in ("cpu", "rocm"):
        expected.add("torch-no-cuda")
    codes = {f["code"] for f in report["findings"] if f["area"] in ("flashinfer", TOOLCHAIN_AREA)}
    assert codes == expected  # no cutlass-dsl-missing / -too-old, no jit-cache-mismatch, no link findings


def test_the_same_machine_in_the_nvcc_era_would_get_toolchain_findings(report: dict[str, Any]) -> None:
    """What makes the empty toolchain result above a statement about the era, not about this machine."""
    if not report["toolchain_check_if_nvcc_era"]:
        pytest.skip(
            "this machine's toolchain would build and link FlashInfer's nvcc era: no contrast to show"
        )
    assert set(report["toolchain_check_if_nvcc_era"]) - set(report["toolchain_check"])


# ---- 2. the real import -----------------------------------------------------------------------------------
def _first_error(raw_import: dict[str, Any]) -> str:
    """The first real error a load meets here: the import's, else torch's device query after it."""
    failed = raw_import if not raw_import["ok"] else raw_import["device_query"]
    assert failed["ok"] is False, "no GPU here: the device query cannot succeed"
    return f"{failed['type']}: {failed['message']}"


def test_importing_gdn_prefill_here_ends_as_the_torch_build_decides(
    raw_import: dict[str, Any], release: Release
) -> None:
    """0.6.18 with the CPU build fails a module-level torch.cuda query in gdn_kernels/gdn_decode_bf16_state.py
    with an AssertionError, outside FlashInfer's (ImportError, RuntimeError) guard, so it escapes and no
    NotImplementedError is ever reached; with the CUDA build it raises RuntimeError there, which the guard
    catches. 0.7.4 imports with either."""
    # From torch.version itself: the facts' flavour is "unknown" for PyPI's default (CUDA) wheel.
    build = raw_import["torch_build"]
    if build not in release.expected_import:
        pytest.skip(f"torch here is the {build} build: what FlashInfer's import does with it is not recorded")
    observed = {k: v for k, v in raw_import.items() if k not in ("device_query", "torch_build")}
    assert observed == release.expected_import[build]


def test_doctor_deep_reports_the_original_import_error(
    raw_import: dict[str, Any], importing: dict[str, Ran], release: Release
) -> None:
    if raw_import["ok"]:
        pytest.skip("import flashinfer.gdn_prefill works with this torch build: no import error to report")
    code, envelope = _envelope(importing["doctor"])
    assert code == 1
    assert envelope["exit_code"] == 1
    flashinfer = envelope["backends"]["flashinfer"]
    assert flashinfer["usable"] is False
    finding = _only(flashinfer["findings"], "flashinfer-import-broken")
    original = f"{raw_import['type']}: {raw_import['message']}"
    assert finding["severity"] == "error"
    assert finding["title"] == f"Importing flashinfer.gdn_prefill fails: {raw_import['type']}"
    assert finding["evidence"][0] == f"import flashinfer.gdn_prefill: {original}"
    assert finding["evidence"][-1] == original  # the traceback's own last line
    assert raw_import["message"] in finding["cause"]
    assert "NotImplementedError" not in json.dumps(finding)
    assert f"pip install --force-reinstall flashinfer-python=={release.version}" in _commands(finding)
    assert "flashinfer-cutedsl-compiles-per-process" in [f["code"] for f in flashinfer["findings"]]


def test_doctor_deep_reports_no_import_error_when_the_import_works(
    raw_import: dict[str, Any], importing: dict[str, Ran]
) -> None:
    if not raw_import["ok"]:
        pytest.skip("import flashinfer.gdn_prefill fails with this torch build: see the test above")
    code, envelope = _envelope(importing["doctor"])
    flashinfer = envelope["backends"]["flashinfer"]
    assert (code, flashinfer["usable"]) == (1, False)  # no GPU here
    codes = [f["code"] for f in flashinfer["findings"]]
    assert "flashinfer-import-broken" not in codes
    assert "flashinfer-cutedsl-compiles-per-process" in codes


def test_the_gdn_backend_load_raises_the_original_error_and_the_resolver_keeps_it(
    raw_import: dict[str, Any], importing: dict[str, Ran]
) -> None:
    loaded = _result(importing["load"])
    assert loaded["ok"] is False
    assert f"{loaded['type']}: {loaded['message']}" == _first_error(raw_import)
    assert loaded["finding"]["code"] == "gdn-first-use-failed"
    assert _first_error(raw_import) in json.dumps(loaded["finding"])


def test_on_an_h200_the_dsl_kernel_check_finds_the_real_sm90_kernel(importing: dict[str, Ran]) -> None:
    """With the device queries answered, the release imports with the real DSL, and _check_dsl_kernel's map of
    capability -> FlashInfer symbol finds the SM90 kernel (a wrong map would raise '... is unavailable')."""
    assert _result(importing["h200"]) == {"ok": True}


def test_on_an_h200_without_the_dsl_load_raises_the_original_import_error(
    importing: dict[str, Ran],
) -> None:
    loaded = _result(importing["h200-without-dsl"])
    original = "ModuleNotFoundError: No module named 'cutlass'"
    assert loaded["ok"] is False
    assert f"{loaded['type']}: {loaded['message']}" == original
    assert loaded["finding"]["code"] == "gdn-first-use-failed"
    assert original in json.dumps(loaded["finding"])


# ---- 3. the nvidia-cutlass-dsl floor ----------------------------------------------------------------------
def test_an_older_dsl_is_reported_too_old_with_the_upgrade_command(
    target: Path, workdir: Path, tmp_path: Path, release: Release
) -> None:
    # importlib.metadata takes the first distribution on sys.path: this one, ahead of the real 4.8.1.
    dist_info = tmp_path / "shadow" / "nvidia_cutlass_dsl-4.0.0.dist-info"
    dist_info.mkdir(parents=True)
    (dist_info / "METADATA").write_text("Metadata-Version: 2.1\nName: nvidia-cutlass-dsl\nVersion: 4.0.0\n")
    env = _env(workdir, dist_info.parent, target, SRC)
    code, envelope = _envelope(_python(_doctor_args(), env, workdir))

    assert code == 1
    fi = envelope["facts"]["flashinfer"]
    assert (fi["cutlass_dsl_version"], fi["cutlass_dsl_satisfied"]) == ("4.0.0", False)
    findings = envelope["backends"]["flashinfer"]["findings"]
    finding = _only(findings, "cutlass-dsl-too-old")
    assert finding["severity"] == "error"
    assert finding["evidence"] == [
        "nvidia-cutlass-dsl 4.0.0",
        f"flashinfer-python {release.version} requires nvidia-cutlass-dsl{release.dsl_floor}",
    ]
    assert _commands(finding) == [f"pip install -U 'nvidia-cutlass-dsl{release.dsl_floor}'"]
    assert "cutlass-dsl-missing" not in [f["code"] for f in findings]


def _site_without_the_dsl(directory: Path) -> Path:
    """A directory of links to every installed package but nvidia-cutlass-dsl's (and no .pth files), to
    stand in for site-packages under ``python -S``: this machine as if the DSL had never been installed."""
    directory.mkdir()
    sites = [*site.getsitepackages(), site.getusersitepackages()]
    for site_dir in map(Path, sites):
        if not site_dir.is_dir():
            continue
        for entry in site_dir.iterdir():
            hidden = entry.name.lower().startswith("nvidia_cutlass_dsl") or entry.suffix == ".pth"
            if not hidden and not (directory / entry.name).exists():
                (directory / entry.name).symlink_to(entry)
    return directory


def test_a_missing_dsl_is_reported_with_the_install_command(
    target: Path, workdir: Path, fake_site: Path, release: Release
) -> None:
    env = _env(workdir, target, SRC, fake_site)
    code, envelope = _envelope(_python(_doctor_args(flags=("-S",)), env, workdir))

    assert code == 1
    fi = envelope["facts"]["flashinfer"]
    assert (fi["version"], fi["era"], fi["cutlass_dsl_version"]) == (release.version, "cutedsl", None)
    findings = envelope["backends"]["flashinfer"]["findings"]
    finding = _only(findings, "cutlass-dsl-missing")
    assert finding["severity"] == "error"
    assert finding["evidence"] == [
        "importlib.metadata: no 'nvidia-cutlass-dsl' distribution",
        f"flashinfer-python {release.version} requires nvidia-cutlass-dsl{release.dsl_floor}",
    ]
    assert _commands(finding)[0] == f"pip install 'nvidia-cutlass-dsl{release.dsl_floor}'"
    assert "cutlass-dsl-too-old" not in [f["code"] for f in findings]


# ---- the kernel cache over the real FlashInfer code ---------------------------------------------------------
# jitguard.install() before FlashInfer is imported: the import hook routes FlashInfer's CuTeDSL compile cache
# and every kernel module's `cached_compile` binding. A real CuTeDSL kernel (a KeyedCompileMixin, as FlashInfer
# writes them, with a host function that launches nothing, so it needs no GPU) then goes through it with the
# real DSL: cute.compile for sm_90a, dump_to_object, the DSL's load_module in a later process, the call.
ROUTED_SCRIPT = (
    H200_LOAD_SCRIPT.split("from jitguard.gdn.backends")[0]
    + r"""
import json, logging, sys, time
import jitguard
jitguard.install()
import flashinfer.gdn_prefill
from flashinfer.gdn_kernels.delta_rule_dsl import custom_compile_cache as ccc, delta_rule_sm90
from jitguard.cutedsl.persisting_compile import is_routed
import cutlass, cutlass.cute as cute, torch
from cutlass.cute.runtime import from_dlpack

"""
    + TINY_KERNEL
    + r"""

logging.basicConfig(level=logging.INFO, stream=sys.stderr)
a = from_dlpack(torch.zeros(32)).mark_layout_dynamic()
start = time.monotonic()
first = ccc.cached_compile(Tiny(True), a, cutlass.Int32(3), compile_options=(cute.GPUArch("sm_90a"),))
took = time.monotonic() - start
again = delta_rule_sm90.cached_compile(Tiny(True), a, cutlass.Int32(3), compile_options=(cute.GPUArch("sm_90a"),))
first(a, cutlass.Int32(5))
print("RESULT " + json.dumps({
    "routed": is_routed(ccc),
    "sm90_binding_routed": delta_rule_sm90.cached_compile is ccc.cached_compile,
    "kernel": type(first).__name__,
    "same_object_again": first is again,
    "in_flashinfers_dict": len(ccc._in_mem_compile_cache),
    "seconds": took,
}))
"""
)


def test_install_routes_flashinfers_compile_cache_and_the_real_dsl_round_trips(
    target: Path, workdir: Path
) -> None:
    """The cache root is moved to another path between the two processes, as a copy to another host or a
    cache restored under another root would be: the DSL's own cache dir and log level (paths and output
    settings, not code) differ too, and the kernel is still loaded, not compiled."""
    first_root, moved_root = workdir / "kernel-cache-test", workdir / "moved" / "kernel-cache-test"
    shutil.rmtree(workdir / "moved", ignore_errors=True)
    env = _env(workdir, target, SRC)
    env["JITGUARD_CACHE_DIR"] = str(first_root / "jitguard")
    env["CUTE_DSL_CACHE_DIR"] = str(first_root / "cute-dsl")
    script = workdir / "routed.py"  # the DSL compiles from source files only
    script.write_text(ROUTED_SCRIPT)
    cold_code, cold_out, cold_err = _python([str(script)], env, workdir)
    cold = _result((cold_code, cold_out, cold_err))
    assert cold["routed"] and cold["sm90_binding_routed"]
    assert cold["same_object_again"] and cold["in_flashinfers_dict"] == 1
    assert "kept the CuTeDSL kernel Tiny(alpha)" in cold_err, cold_err[-4000:]
    objects = list((first_root / "jitguard" / "kernels").glob("*.o"))
    assert len(objects) == 1 and objects[0].read_bytes()[:4] == b"\x7fELF"

    moved_root.parent.mkdir(parents=True)
    first_root.rename(moved_root)
    env["JITGUARD_CACHE_DIR"] = str(moved_root / "jitguard")
    env["CUTE_DSL_CACHE_DIR"] = str(moved_root / "cute-dsl")
    env["CUTE_DSL_LOG_LEVEL"] = "40"
    warm_code, warm_out, warm_err = _python([str(script)], env, workdir)
    warm = _result((warm_code, warm_out, warm_err))
    assert "loaded the CuTeDSL kernel Tiny(alpha) from the kernel cache" in warm_err, warm_err[-4000:]
    assert "kept the CuTeDSL kernel" not in warm_err  # nothing compiled, nothing published again
    assert warm["same_object_again"] and warm["in_flashinfers_dict"] == 1  # FlashInfer's dict holds the load
    assert "jitguard-fault" not in cold_err + warm_err

    env["JITGUARD_CUTEDSL_CACHE"] = "0"
    off_code, off_out, off_err = _python([str(script)], env, workdir)
    off = _result((off_code, off_out, off_err))
    assert not off["routed"] and "CuTeDSL kernel" not in off_err
