"""`jitguard doctor --engine vllm`: every FlashInfer choice vLLM would make here, with jitguard's verdict, from
this GPU-less machine's real facts (no libcuda: FlashInfer's JIT link fails), its real failure cache and a
real prebuilt module in FlashInfer's workspace. Text and JSON, the JSON validated against the shipped schema."""

from __future__ import annotations

import copy
import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from test_build_flashinfer_cli import _env, _jitguard

from envelope_schemas import assert_rejected, assert_valid
from jitguard.decision.engine_verdicts import CHOICES
from release_preparation import PREPARE_ONE_TIMEOUT, vllm_source

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc builds the prebuilt module stand-in")
ARCH = {"FLASHINFER_CUDA_ARCH_LIST": "9.0a"}


def doctor(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    done = _jitguard(["doctor", "--engine", "vllm", *args], env)
    assert "Traceback" not in done.stderr, done.stderr
    assert done.returncode == 1, done.stderr  # flashinfer is blocked on this machine
    return done


def choice(payload: dict[str, Any], key: str) -> dict[str, Any]:
    return next(c for c in payload["engine"]["choices"] if c["choice"] == key)


@pytest.fixture(scope="module")
def payload(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    tmp = tmp_path_factory.mktemp("doctor-engine")
    env = _env(tmp, FLASHINFER_WORKSPACE_BASE=str(tmp / "ws"), **ARCH)
    data: dict[str, Any] = json.loads(doctor(env, "--json").stdout)
    assert_valid(data)
    return data


def test_every_choice_is_listed_in_the_table_order_with_where_vllm_makes_it(payload: dict[str, Any]) -> None:
    engine = payload["engine"]
    assert [c["choice"] for c in engine["choices"]] == [c.key for c in CHOICES]
    for row in engine["choices"]:
        assert row["site"] is not None and row["site"]["module"].startswith("vllm."), row


def test_a_failing_jit_link_dooms_every_choice_here(payload: dict[str, Any]) -> None:
    for row in payload["engine"]["choices"]:
        assert not row["usable"], row["choice"]
        assert "link-missing-libcuda" in [f["code"] for f in row["findings"]], row["choice"]
        assert row["if_picked"] == "fallback"
        assert row["if_named"] == ("refuse" if row["named_by"] else None)


def test_the_json_schema_rejects_a_real_defect(payload: dict[str, Any]) -> None:
    for defect in (
        lambda p: choice(p, "sampler").update(usable=True),  # contradicts its error findings
        lambda p: choice(p, "sampler").update(if_named="maybe"),
        lambda p: choice(p, "moe").update(choice="cuda-graphs"),
        lambda p: p["engine"].update(name="sglang"),
    ):
        broken = copy.deepcopy(payload)
        defect(broken)
        assert_rejected(broken)


def test_a_prebuilt_module_and_a_recorded_failure_change_only_their_own_choices(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    env = _env(tmp_path, FLASHINFER_WORKSPACE_BASE=str(workspace), **ARCH)
    first = json.loads(doctor(env, "--json").stdout)
    # FlashInfer's own workspace layout: <base>/.cache/flashinfer/<version>/90a/cached_ops/<module>/<module>.so
    version = first["facts"]["flashinfer"]["version"]
    for module in ("sampling", "fused_moe_90"):
        directory = workspace / ".cache" / "flashinfer" / version / "90a" / "cached_ops" / module
        directory.mkdir(parents=True)
        source = directory / "stub.c"
        source.write_text("int jitguard_prebuilt(void) { return 0; }\n")
        subprocess.run(
            ["gcc", "-shared", "-fPIC", "-o", str(directory / f"{module}.so"), str(source)], check=True
        )
    from jitguard.findings.catalog import make
    from jitguard.state.failure_cache import FailureCache

    finding = make("build-failed", backend="flashinfer", evidence=["a real build log"])
    FailureCache(Path(env["JITGUARD_CACHE_DIR"])).record_failure(
        "fused_moe_90", first["fingerprint"], [finding]
    )
    data = json.loads(doctor(env, "--json").stdout)
    assert_valid(data)
    sampler, moe = choice(data, "sampler"), choice(data, "moe")
    assert sampler["usable"] and sampler["prebuilt"] == ["sampling"]  # nothing to compile: the link is moot
    assert [f["code"] for f in sampler["findings"]] == ["flashinfer-module-prebuilt"]
    assert not moe["usable"]
    assert [f["code"] for f in moe["findings"] if f["severity"] == "error"] == ["flashinfer-cached-failure"]
    assert not choice(data, "attention")[
        "usable"
    ]  # its modules are not prebuilt: the failing link still counts


def test_the_text_report_says_what_vllm_does_with_each_choice(tmp_path: Path) -> None:
    env = _env(
        tmp_path, FLASHINFER_WORKSPACE_BASE=str(tmp_path / "ws"), VLLM_USE_FLASHINFER_SAMPLER="1", **ARCH
    )
    text = doctor(env).stdout
    assert "its FlashInfer choices here" in text
    for c in CHOICES:
        assert f"{c.title}: cannot work here" in text
    assert "vLLM uses the PyTorch-native sampler" in text
    assert "when you name it (VLLM_USE_FLASHINFER_SAMPLER=1; set here: VLLM_USE_FLASHINFER_SAMPLER=1)" in text
    assert "topk_topp_sampler: flashinfer_sampler_supported" in text  # the newest layout: both runners ask it


def test_doctor_engine_sglang_lists_each_phase_with_its_verdict_in_text_and_json(tmp_path: Path) -> None:
    env = _env(tmp_path, FLASHINFER_WORKSPACE_BASE=str(tmp_path / "ws"), **ARCH)
    done = _jitguard(["doctor", "--engine", "sglang", "--json"], env)
    assert "Traceback" not in done.stderr, done.stderr
    data = json.loads(done.stdout)
    assert_valid(data)
    engine = data["engine"]
    assert engine["name"] == "sglang" and engine["choices"]
    for row in engine["choices"]:  # no GPU here: FlashInfer cannot work in any phase
        assert row["flashinfer_usable"] is False and row["when_named"] == "stop at start-up"
    text = _jitguard(["doctor", "--engine", "sglang"], env)
    assert "Traceback" not in text.stderr and "prefill" in text.stdout and "stop" not in text.stderr
    broken = copy.deepcopy(data)
    broken["engine"]["choices"][0]["when_named"] = "build anyway"
    assert_rejected(broken)


@pytest.mark.timeout(PREPARE_ONE_TIMEOUT + 300)
def test_the_installed_vllms_choice_sites_are_counted_in_text_and_json(tmp_path: Path) -> None:
    real_vllm = vllm_source("0.33.0")
    env = _env(tmp_path, FLASHINFER_WORKSPACE_BASE=str(tmp_path / "ws"), **ARCH)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(real_vllm), env.get("PYTHONPATH", "")) if p)
    data = json.loads(doctor(env, "--json").stdout)
    assert_valid(data)
    assert data["engine"]["version"] == "0.33.0" and data["engine"]["drift"] is None
    assert data["engine"]["coverage"]["summary"] == "vLLM 0.33.0: 6 of 6 choice sites found"
    assert "vLLM 0.33.0: 6 of 6 choice sites found (all guarded)" in doctor(env).stdout
