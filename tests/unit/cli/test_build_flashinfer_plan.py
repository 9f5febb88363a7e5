"""`jitguard build flashinfer-gdn --plan`: the instances and files a model's GDN module compiles, from its
config and FlashInfer's version alone (no FlashInfer import, no compile), and the flags' usage errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from envelope_schemas import assert_rejected, assert_valid
from jitguard.cli import main

MODELS = Path(__file__).parents[2] / "data" / "models"
QWEN35 = MODELS / "qwen3_5" / "config.json"
QWEN3_NEXT = MODELS / "qwen3_next"


@pytest.fixture(autouse=True)
def _isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JITGUARD_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("FLASHINFER_WORKSPACE_BASE", str(tmp_path / "workspace"))
    monkeypatch.delenv("FLASHINFER_CUDA_ARCH_LIST", raising=False)
    monkeypatch.setenv("NO_COLOR", "1")


def _plan_json(capsys: pytest.CaptureFixture[str], *args: str) -> dict[str, Any]:
    assert main(["build", "flashinfer-gdn", "--plan", "--json", *args]) == 0
    payload: dict[str, Any] = json.loads(capsys.readouterr().out)
    assert_valid(payload)
    return payload


def test_the_plan_for_a_qwen35_config_on_flashinfer_066_is_one_instance_and_three_files(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    assert (
        main(["build", "flashinfer-gdn", "--model", str(QWEN35), "--plan", "--flashinfer-version", "0.6.6"])
        == 0
    )
    text = capsys.readouterr().out
    assert "module:    gdn_prefill_sm90_only_bf16_g1b1a1i1 (only these instances)" in text
    assert (
        "instances: 1 of 32" in text
        and "bf16_g1b1a1i1  bfloat16, GVA (Hv > Hq), beta, alpha, initial state" in text
    )
    assert "compiles:  3 of FlashInfer's 34 files" in text
    for source in (
        "gdn_prefill_kernel_bf16_g1b1a1i1.cu",
        "gdn_prefill_launcher.cu",
        "prefill_kernel_delta_rule_sm90.cu",
    ):
        assert f"    {source}" in text
    library = (
        tmp_path / "workspace/.cache/flashinfer/0.6.6/90a/cached_ops/gdn_prefill_sm90_only_bf16_g1b1a1i1"
    )
    assert f"{library}/gdn_prefill_sm90_only_bf16_g1b1a1i1.so (not built yet)" in text
    assert f"Build it: jitguard build flashinfer-gdn --model {QWEN35}" in text
    assert not (tmp_path / "workspace").exists()  # planning creates nothing


def test_the_plan_json_for_flashinfer_0612_names_the_checkpoint_flag_and_66_files(
    capsys: pytest.CaptureFixture[str],
) -> None:
    payload = _plan_json(capsys, "--model", str(QWEN3_NEXT), "--flashinfer-version", "0.6.12")
    plan = payload["plan"]
    assert plan["module"] == "gdn_prefill_sm90_only_bf16_g1b1a1i1c0"
    assert (plan["tu_count"], plan["full_tu_count"], plan["partial"]) == (3, 66, True)
    assert plan["variants"][0]["checkpointing"] is False
    assert payload["model"]["num_qk_heads"] == 16 and payload["model"]["head_dim_qk"] == 128
    assert payload["built"] is False
    assert_rejected({**payload, "plan": {**plan, "tu_count": 0}})
    assert_rejected({**payload, "status": "built"})


def test_without_a_model_the_plan_is_flashinfers_full_module(capsys: pytest.CaptureFixture[str]) -> None:
    payload = _plan_json(capsys, "--flashinfer-version", "0.6.6")
    assert payload["plan"]["module"] == "gdn_prefill_sm90" and payload["plan"]["partial"] is False
    assert payload["plan"]["tu_count"] == 34 and payload["model"] is None


def test_named_instances_dtype_and_checkpointing_shape_the_plan(capsys: pytest.CaptureFixture[str]) -> None:
    payload = _plan_json(
        capsys,
        "--model",
        str(QWEN35),
        "--dtype",
        "float16",
        "--checkpointing",
        "--flashinfer-version",
        "0.6.12",
    )
    assert [v["name"] for v in payload["plan"]["variants"]] == ["half_g1b1a1i1c0", "half_g1b1a1i1c1"]
    payload = _plan_json(
        capsys, "--variant", "bf16_g1b1a1i0", "--variant", "bf16_g1b1a1i1", "--flashinfer-version", "0.6.6"
    )
    assert payload["plan"]["module"] == "gdn_prefill_sm90_only_bf16_g1b1a1i0_bf16_g1b1a1i1"
    assert payload["plan"]["tu_count"] == 4


def test_a_float32_config_plans_both_dtypes_and_says_why(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    config = json.loads((QWEN3_NEXT / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**config, "torch_dtype": "float32"}))
    payload = _plan_json(capsys, "--model", str(tmp_path), "--flashinfer-version", "0.6.6")
    assert sorted(v["dtype"] for v in payload["plan"]["variants"]) == ["bfloat16", "float16"]
    assert "pass --dtype" in payload["notes"][0]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--dtype", "float16"], "give --model PATH too"),
        (["--model", "/nonexistent/config.json", "--plan"], "no such file"),
        (["--variant", "bf16_g1b1a1", "--plan", "--flashinfer-version", "0.6.6"], "e.g. bf16_g1b1a1i1"),
        (["--flashinfer-version", "0.6.6"], "it needs --plan"),
        (["--plan", "--flashinfer-version", "0.6.18", "--variant", "bf16_g1b1a1i1"], "0.6.3 - 0.6.13"),
    ],
)
def test_bad_selections_are_usage_errors(
    args: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["build", "flashinfer-gdn", *args]) == 2
    assert message in capsys.readouterr().err


def test_a_config_without_gdn_layers_is_a_usage_error_that_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llama", "torch_dtype": "bfloat16"}))
    assert main(["build", "flashinfer-gdn", "--model", str(tmp_path), "--plan"]) == 2
    assert "not a model with Gated DeltaNet layers" in capsys.readouterr().err


def test_the_plan_imports_neither_flashinfer_nor_torch(tmp_path: Path) -> None:
    code = (
        "import sys; from jitguard.cli import main; "
        f"rc = main(['build', 'flashinfer-gdn', '--model', {str(QWEN35)!r}, '--plan', '--flashinfer-version', '0.6.6']); "
        "print('IMPORTED', sorted(m for m in ('flashinfer', 'torch') if m in sys.modules)); sys.exit(rc)"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "IMPORTED []" in proc.stdout


def test_the_plan_works_where_flashinfer_is_not_installed_given_a_version() -> None:
    """Any host: in a process where flashinfer-python's metadata cannot be found, --flashinfer-version plans."""
    code = (
        "import importlib.metadata as m, sys\n"
        "real = m.version\n"
        "def version(name):\n"
        "    if name == 'flashinfer-python': raise m.PackageNotFoundError(name)\n"
        "    return real(name)\n"
        "m.version = version\n"
        "from jitguard.cli import main\n"
        f"sys.exit(main(['build', 'flashinfer-gdn', '--model', {str(QWEN35)!r}, '--plan'] + sys.argv[1:]))\n"
    )
    without = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert without.returncode == 2 and "pass --flashinfer-version" in without.stderr
    given = subprocess.run(
        [sys.executable, "-c", code, "--flashinfer-version", "0.6.12"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert given.returncode == 0, given.stderr
    assert "gdn_prefill_sm90_only_bf16_g1b1a1i1c0" in given.stdout
