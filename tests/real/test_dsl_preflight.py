"""The CuTeDSL era's pre-flight with the real flashinfer-python 0.6.18 and the real nvidia-cutlass-dsl 4.8.x of
this venv, through `jitguard doctor --json` in a subprocess: the DSL's files checked against their RECORD, and
`--deep` importing the SM90 GDN prefill kernel module whose import error FlashInfer swallows.

The damage is real, in a copy of the installed DSL (tests/lib/dsl_copies.py) first on PYTHONPATH: its
``cutlass/utils/tensormap_manager.py`` loses the deprecated ``TensorMapUpdateMode`` alias (DSL 4.8.1 announces
its removal "in a future release"; FlashInfer 0.6.18's delta_rule_dsl still imports it from there). Without
any GPU, FlashInfer 0.6.18 cannot be imported under a CPU-only torch (a module-level device query), so the
runs that import it answer torch's two device queries as an H200 would, from a sitecustomize (the stand-in
tests/real/test_flashinfer_cutedsl_era.py uses); everything else is the real code.
"""

from __future__ import annotations

import csv
import os
from pathlib import Path
from typing import Any

import pytest
from test_flashinfer_cutedsl_era import (
    RELEASES,
    SRC,
    Release,
    _commands,
    _env,
    _envelope,
    _only,
    _python,
    target,
    workdir,
)

from dsl_copies import copy_dsl, dsl_file, installed_dsl
from envelope_schemas import assert_valid
from fake_dists import record_hash

__all__ = ["target", "workdir"]  # the fixtures this module uses from the CuTeDSL-era test
FLASHINFER = RELEASES[0]  # 0.6.18: its delta_rule_dsl imports the alias this module's damage removes
VERSION = FLASHINFER.version


@pytest.fixture(scope="module")
def release() -> Release:
    """The one release the CuTeDSL-era fixtures (target, workdir) install here."""
    return FLASHINFER


CORE = "nvidia-cutlass-dsl-libs-core"
SHIM = "def __getattr__"
H200_ANSWERS = """import types, torch
torch.cuda.get_device_properties = lambda *a, **k: types.SimpleNamespace(multi_processor_count=132)
torch.cuda.get_device_capability = lambda *a, **k: (9, 0)
"""
KERNEL = "flashinfer.gdn_kernels.delta_rule_dsl.delta_rule_sm90"


def _doctor(env: dict[str, str], cwd: Path, *extra: str) -> tuple[int, dict[str, Any]]:
    code, payload = _envelope(
        _python(["-m", "jitguard", "doctor", "--backend", "flashinfer", "--json", *extra], env, cwd)
    )
    assert_valid(payload)
    return code, payload


def _answers(directory: Path) -> Path:
    directory.mkdir()
    (directory / "sitecustomize.py").write_text(H200_ANSWERS)
    return directory


def _version(name: str) -> str:
    return next(d.version for d in installed_dsl() if (d.metadata["Name"] or "").lower() == name)


def _without_the_alias(tmp_path: Path, *, record_too: bool) -> Path:
    """A copy of the installed DSL whose tensormap_manager.py lacks the deprecated alias; ``record_too``: its
    RECORD lists the new file (a DSL release that dropped it), else the old one (a file of another version)."""
    shim = dsl_file(CORE, "cutlass/utils/tensormap_manager.py")
    site = copy_dsl(tmp_path / "env", copied=[shim])
    text = (site / shim).read_text()
    if SHIM not in text or "TensorMapUpdateMode" not in text:
        pytest.skip(f"this DSL's {shim} has no deprecated TensorMapUpdateMode alias to drop")
    data = text[: text.index(SHIM)].encode()
    (site / shim).write_bytes(data)
    if record_too:
        record = next(site.glob(f"{CORE.replace('-', '_')}-*.dist-info")) / "RECORD"
        rows = [
            [p, record_hash(data), str(len(data))] if p == shim else [p, *rest]
            for p, *rest in csv.reader(record.open())
        ]
        with record.open("w", newline="") as f:
            csv.writer(f).writerows(rows)
    return site


def _deep_without_the_alias(
    target: Path, workdir: Path, tmp_path: Path, *, record_too: bool
) -> tuple[Path, int, dict[str, Any]]:
    """`jitguard doctor --deep --json` over that copy, with the device queries answered: (copy, exit, payload)."""
    site = _without_the_alias(tmp_path, record_too=record_too)
    env = _env(workdir, site, _answers(tmp_path / "h200"), target, SRC)
    return (site, *_doctor(env, workdir, "--deep"))


def test_doctor_checks_the_real_dsl_against_its_record_and_finds_it_intact(
    target: Path, workdir: Path
) -> None:
    installed_dsl()
    _, payload = _doctor(_env(workdir, target, SRC), workdir)
    dsl = payload["facts"]["dsl_install"]
    assert {d["name"] for d in dsl["dists"]} >= {"nvidia-cutlass-dsl", "nvidia-cutlass-dsl-libs-base", CORE}
    for d in dsl["dists"]:
        assert (d["missing"], d["differ"], d["unverifiable"]) == ([], [], None), d["name"]
        assert d["files_checked"] > 0
    assert "cutlass-dsl-install-damaged" not in [
        f["code"] for f in payload["backends"]["flashinfer"]["findings"]
    ]


def test_a_dsl_file_of_another_version_is_named_and_deep_finds_the_kernel_error_flashinfer_swallows(
    target: Path, workdir: Path, tmp_path: Path
) -> None:
    site, code, payload = _deep_without_the_alias(target, workdir, tmp_path, record_too=False)
    findings = payload["backends"]["flashinfer"]["findings"]
    assert code == 1 and payload["backends"]["flashinfer"]["usable"] is False

    damaged = _only(findings, "cutlass-dsl-install-damaged")
    shim = dsl_file(CORE, "cutlass/utils/tensormap_manager.py")
    assert (
        f"  {shim}: matches no installed wheel's RECORD (corrupt, truncated or another version)"
        in damaged["evidence"]
    )
    reinstall = f"pip install --force-reinstall --no-deps '{CORE}=={_version(CORE)}'"
    assert _commands(damaged)[0] == reinstall
    core = next(d for d in payload["facts"]["dsl_install"]["dists"] if d["name"] == CORE)
    assert core["location"] == str(site) and [d["path"] for d in core["differ"]] == [shim]

    kernel = _only(findings, "flashinfer-dsl-kernel-import-broken")
    assert kernel["title"] == "FlashInfer's SM90 GDN prefill kernel fails to import: ImportError"
    assert (
        "cannot import name 'TensorMapUpdateMode' from 'cutlass.utils.tensormap_manager'" in kernel["cause"]
    )
    assert "NotImplementedError('SM90 GDN prefill DSL kernel is unavailable')" in kernel["cause"]
    assert any("collective_store_tma.py" in e for e in kernel["evidence"])  # FlashInfer's own import line
    assert _commands(kernel)[:2] == [reinstall, f"python -c 'import {KERNEL}'"]
    assert "flashinfer-import-broken" not in [f["code"] for f in findings]  # flashinfer.gdn_prefill imports


def test_a_dsl_release_without_the_alias_is_reported_with_the_dsl_at_flashinfers_floor(
    target: Path, workdir: Path, tmp_path: Path
) -> None:
    _, _, payload = _deep_without_the_alias(target, workdir, tmp_path, record_too=True)
    findings = payload["backends"]["flashinfer"]["findings"]
    assert "cutlass-dsl-install-damaged" not in [f["code"] for f in findings]  # every file is its wheel's
    kernel = _only(findings, "flashinfer-dsl-kernel-import-broken")
    assert "comes from the CUTLASS DSL" in kernel["cause"]
    extra = (
        "[cu13]" if any((d.metadata["Name"] or "").lower().endswith("-cu13") for d in installed_dsl()) else ""
    )
    assert (
        _commands(kernel)[0] == f"pip install --force-reinstall 'nvidia-cutlass-dsl{extra}==4.6.2'"
    )  # >=4.6.2a0


def test_every_kernel_module_jitguard_imports_is_the_real_one_of_this_flashinfer(
    target: Path, workdir: Path, tmp_path: Path
) -> None:
    """The module map (facts.flashinfer.GDN_KERNEL_MODULES) against the real 0.6.18: each module exists and
    imports with the real DSL, so a failure of the probe is the machine's, never a wrong path."""
    import dataclasses

    from jitguard.facts import flashinfer, packages
    from jitguard.facts.import_probe import probe_import

    installed_dsl()
    fi = dataclasses.replace(
        flashinfer.probe(packages.probe(), {"HOME": str(tmp_path)}),
        era="cutedsl",
        package_dir=str(target / "flashinfer"),
        version=VERSION,
    )
    kernels = flashinfer.gdn_kernel_modules(fi, [9, 10, 12])
    assert [k.label for k in kernels] == ["SM90", "SM100", "SM120"]
    env = _env(workdir, _answers(tmp_path / "h200"), target, SRC)
    for kernel in kernels:
        probe = probe_import(kernel.module, env=env, timeout=300)
        assert probe.ok, (kernel.module, probe.error_type, probe.error_message)
    assert os.path.isfile(target / "flashinfer" / "gdn_kernels" / "blackwell" / "gdn_prefill.py")
