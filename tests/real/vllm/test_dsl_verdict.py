"""The CuTeDSL era's verdict on the DSL as the engine will import it, with each CuTeDSL-era release's REAL
FlashInfer and nvidia-cutlass-dsl (0.26.0: 0.6.14 + 4.6.0; 0.30.0: 0.6.18.post1 + 4.7.1; 0.33.0:
0.7.2.post1 + 4.8.0), installed with ``pip install --target`` by .ci/install_vllm.sh as a user's --target,
rules_python or PEX deployment is: the DSL's .pth file sits in a directory Python never reads .pth files in.

Each check is `jitguard doctor --json` in a subprocess of a real venv without a DSL of its own
(``python_without_the_dsl``); the breakage is real: the release's ``dsl_packages`` entry left off the path,
another project's ``cutlass`` first on it, a copy of FlashInfer without the SM90 kernel module, a copy of the
DSL without a module that kernel imports. The fix each finding gives is run as given and must cure it.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
from pathlib import Path
from typing import Any

import pytest

from dsl_copies import copy_dsl
from envelope_schemas import assert_valid

pytestmark = pytest.mark.slow

SM90 = "flashinfer.gdn_kernels.delta_rule_dsl.delta_rule_sm90"
UNAVAILABLE = "SM90 GDN prefill DSL kernel is unavailable"


@pytest.fixture(scope="module")
def cutedsl(release: Any) -> Any:
    if release.era != "cutedsl":
        pytest.skip(f"vLLM {release.version} pins an nvcc-era FlashInfer: no DSL to import")
    return release


def doctor(
    python: Path, pythonpath: str, workdir: Path, *, prefix: str = "", deep: bool = False
) -> dict[str, Any]:
    """`jitguard doctor --backend flashinfer --json` on this machine dressed as nothing: the real facts of the
    environment ``pythonpath`` makes (``prefix``: shell run before it, e.g. a fix)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JITGUARD_", "FLASHINFER_", "VLLM_"))}
    env.update(
        PYTHONPATH=pythonpath,
        JITGUARD_CACHE_DIR=str(workdir / "jitguard-cache"),
        FLASHINFER_WORKSPACE_BASE=str(workdir / "flashinfer-workspace"),
    )
    command = f"{prefix}\n{shlex.quote(str(python))} -m jitguard doctor --backend flashinfer --json"
    command += " --deep" if deep else ""
    proc = subprocess.run(
        ["bash", "-c", command], env=env, cwd=workdir, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode in (0, 1), proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr, proc.stderr[-4000:]
    envelope = json.loads(proc.stdout)
    assert_valid(envelope)
    return dict(envelope)


def findings(envelope: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {f["code"]: f for f in envelope["backends"]["flashinfer"]["findings"]}


def src_path(release: Any) -> str:
    return f"{Path(__file__).resolve().parents[3] / 'src'}{os.pathsep}"


# ---- the DSL installed, its packages off the path (pip --target: its .pth is never read) --------------------
@pytest.fixture(scope="module")
def off_path(cutedsl: Any, python_without_the_dsl: Path, tmp_path_factory: pytest.TempPathFactory) -> Any:
    workdir = tmp_path_factory.mktemp(f"dsl-off-path-{cutedsl.version}")
    broken = cutedsl.without_dsl_path()
    return doctor(python_without_the_dsl, src_path(cutedsl) + broken.pythonpath, workdir), workdir


def test_a_dsl_off_the_path_blocks_flashinfer_and_names_the_directory(off_path: Any, cutedsl: Any) -> None:
    envelope, _ = off_path
    [packages] = cutedsl.dsl_packages
    finding = findings(envelope)["cutlass-dsl-off-path"]
    assert finding["severity"] == "error"
    assert packages in finding["title"]
    assert "is not read: its directory is not a site directory" in finding["cause"]
    assert UNAVAILABLE in finding["cause"]
    assert finding["evidence"][0].startswith("importlib.machinery.PathFinder.find_spec('cutlass'): not found")
    assert any(line.endswith("present, not read at start") for line in finding["evidence"])
    assert finding["fixes"][0]["command"] == f"export PYTHONPATH={packages}" + "${PYTHONPATH:+:$PYTHONPATH}"
    dsl = envelope["facts"]["flashinfer"]["cutlass_dsl_version"]
    assert f"nvidia-cutlass-dsl[cu13]=={dsl}" in finding["fixes"][1]["command"]
    assert not envelope["backends"]["flashinfer"]["usable"]


def test_the_dsl_path_check_is_cheap(off_path: Any) -> None:
    envelope, _ = off_path
    assert envelope["facts"]["dsl_path"]["seconds"] < 2


def test_the_fix_as_given_cures_it_and_cutlass_imports(
    off_path: Any, cutedsl: Any, python_without_the_dsl: Path
) -> None:
    envelope, workdir = off_path
    fix = findings(envelope)["cutlass-dsl-off-path"]["fixes"][0]["command"]
    broken = src_path(cutedsl) + cutedsl.without_dsl_path().pythonpath
    cured = doctor(python_without_the_dsl, broken, workdir, prefix=fix)
    assert "cutlass-dsl-off-path" not in findings(cured)
    [packages] = cutedsl.dsl_packages
    assert cured["facts"]["dsl_path"]["imported_from"] == packages
    env = {**os.environ, "PYTHONPATH": broken}
    check = f"{fix}\n{shlex.quote(str(python_without_the_dsl))} -c 'import cutlass; print(cutlass.__file__)'"
    proc = subprocess.run(["bash", "-c", check], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip() == f"{packages}/cutlass/__init__.py"


def test_the_release_as_prepared_passes_the_dsl_checks(
    cutedsl: Any, python_without_the_dsl: Path, tmp_path: Path
) -> None:
    envelope = doctor(python_without_the_dsl, src_path(cutedsl) + cutedsl.pythonpath, tmp_path)
    found = findings(envelope)
    blocked = {"cutlass-dsl-off-path", "cutlass-dsl-shadowed", "flashinfer-gdn-kernel-missing"}
    assert not blocked & set(found), found.keys()
    assert "cutlass-dsl-lacks-kernel-imports" not in found
    [kernel] = envelope["facts"]["dsl_path"]["kernels"]
    assert (kernel["label"], kernel["module"], kernel["missing_imports"]) == ("SM90", SM90, [])


# ---- another `cutlass` first on the path -----------------------------------------------------------------
def test_another_projects_cutlass_first_on_the_path_is_shadowing(
    cutedsl: Any, python_without_the_dsl: Path, tmp_path: Path
) -> None:
    other = tmp_path / "other"
    (other / "cutlass").mkdir(parents=True)
    (other / "cutlass" / "__init__.py").write_text("# the CUTLASS Python interface, not the DSL\n")
    pythonpath = src_path(cutedsl) + os.pathsep.join([str(other), cutedsl.pythonpath])
    finding = findings(doctor(python_without_the_dsl, pythonpath, tmp_path))["cutlass-dsl-shadowed"]
    assert finding["severity"] == "error"
    assert "another project's `cutlass` package" in finding["title"]
    assert str(other) in finding["title"]


# ---- a FlashInfer without the SM90 kernel; a DSL without a module the kernel imports ------------------------
def _linked_tree(source: Path, target: Path, leave_out: Path) -> None:
    """``target`` as ``source`` with every entry a link, except along the way to ``leave_out`` (relative),
    which is left out."""
    target.mkdir(parents=True)
    head, *rest = leave_out.parts
    for entry in source.iterdir():
        if entry.name != head:
            (target / entry.name).symlink_to(entry)
        elif rest:
            _linked_tree(entry, target / entry.name, Path(*rest))


def test_a_flashinfer_without_the_sm90_kernel_module_is_named(
    cutedsl: Any, python_without_the_dsl: Path, tmp_path: Path
) -> None:
    path = cutedsl.pythonpath.split(os.pathsep)
    deps = next(p for p in path if (Path(p) / "flashinfer" / "gdn_prefill.py").is_file())
    copy = tmp_path / "deps"
    _linked_tree(Path(deps), copy, Path("flashinfer/gdn_kernels/delta_rule_dsl/delta_rule_sm90.py"))
    pythonpath = src_path(cutedsl) + os.pathsep.join([str(copy), *path])
    finding = findings(doctor(python_without_the_dsl, pythonpath, tmp_path))["flashinfer-gdn-kernel-missing"]
    assert finding["severity"] == "error"
    assert f"no SM90 GDN prefill kernel module ({SM90})" in finding["title"]
    assert UNAVAILABLE in finding["cause"]
    assert "pip install --force-reinstall --no-deps flashinfer-python==" in finding["fixes"][0]["command"]


def test_a_dsl_without_a_module_the_kernel_imports_is_named(
    cutedsl: Any, python_without_the_dsl: Path, tmp_path: Path
) -> None:
    path = cutedsl.without_dsl_path().pythonpath.split(os.pathsep)
    site = copy_dsl(tmp_path / "dsl", path=path)
    packages = site / "nvidia_cutlass_dsl" / "dsl_packages"
    if not packages.is_dir():
        packages = site / "nvidia_cutlass_dsl" / "python_packages"
    subprocess.run(["rm", "-rf", str(packages / "cutlass" / "pipeline")], check=True)
    pythonpath = src_path(cutedsl) + os.pathsep.join([str(site), str(packages), *path])
    found = findings(doctor(python_without_the_dsl, pythonpath, tmp_path))
    finding = found["cutlass-dsl-lacks-kernel-imports"]
    assert finding["severity"] == "error"
    assert "(cutlass.pipeline)" in finding["title"]
    assert "cutlass-dsl-install-damaged" in found  # the files its RECORD lists are gone too


STRICT = """
import json
from jitguard.errors import BackendUnavailable
from jitguard.gdn.dispatch import resolve
try:
    resolve("flashinfer")
    print("RESULT " + json.dumps(None))
except BackendUnavailable as exc:
    print("RESULT " + json.dumps({"codes": [f.code for f in exc.findings], "message": str(exc)}))
"""


def test_strict_flashinfer_raises_with_the_directory_to_export(
    off_path: Any, cutedsl: Any, python_without_the_dsl: Path
) -> None:
    _, workdir = off_path
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JITGUARD_", "FLASHINFER_"))}
    env.update(
        PYTHONPATH=src_path(cutedsl) + cutedsl.without_dsl_path().pythonpath,
        JITGUARD_CACHE_DIR=str(workdir / "jitguard-cache"),
    )
    proc = subprocess.run(
        [str(python_without_the_dsl), "-c", STRICT], env=env, capture_output=True, text=True, timeout=300
    )
    [line] = [x for x in proc.stdout.splitlines() if x.startswith("RESULT ")]
    raised = json.loads(line[len("RESULT ") :])
    assert raised is not None, "the named backend was not refused"
    assert "cutlass-dsl-off-path" in raised["codes"]
    [packages] = cutedsl.dsl_packages
    assert f"export PYTHONPATH={packages}" in raised["message"]


def test_the_deep_import_names_the_same_fix(
    cutedsl: Any, python_without_the_dsl: Path, tmp_path: Path
) -> None:
    pythonpath = src_path(cutedsl) + cutedsl.without_dsl_path().pythonpath
    found = findings(doctor(python_without_the_dsl, pythonpath, tmp_path, deep=True))
    # FlashInfer 0.6.14-0.6.17 import the GDN module and swallow its kernel's error (the kernel import is what
    # fails); 0.6.18+ import the DSL at the module's top, so the module import itself fails the same way.
    finding = found.get("flashinfer-dsl-kernel-import-broken") or found["flashinfer-import-broken"]
    assert "No module named 'cutlass'" in finding["cause"] and "(cutlass-dsl-off-path)" in finding["cause"]
    [packages] = cutedsl.dsl_packages
    assert finding["fixes"][0]["command"] == f"export PYTHONPATH={packages}" + "${PYTHONPATH:+:$PYTHONPATH}"
