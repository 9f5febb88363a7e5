"""The plugin against the REAL code of SGLang 0.5.17, the release that keeps its process-wide linear-attention
choice in a dict (``_BACKENDS``: prefill, decode and verify) instead of the 0.5.11-0.5.16 globals, with
FlashInfer 0.6.15 (CuTeDSL GDN). jitguard read the globals there and faulted, leaving SGLang's choice
unchecked in every scheduler. Here SGLang's own ``load_plugins()`` installs jitguard and SGLang's own
``initialize_linear_attn_config`` makes the choice, on this machine as it is (no GPU: FlashInfer's GDN kernels
cannot run, whoever picked them)."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from conftest import SglangRelease

pytestmark = pytest.mark.slow

SCENARIO = Path(__file__).with_name("process_table_scenario.py")
VERSION = "0.5.17"
FALLBACK = "jitguard: SGLang chose FlashInfer"

Result = tuple[dict[str, Any], str]


@pytest.fixture(scope="module")
def release(releases: Callable[[str], SglangRelease]) -> SglangRelease:
    return releases(VERSION)


def run(release: SglangRelease, runs: list[dict[str, Any]], tmp: Path) -> Result:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JITGUARD_", "SGLANG_"))}
    env.update(
        JITGUARD_CACHE_DIR=str(tmp / "jitguard-cache"),
        FLASHINFER_WORKSPACE_BASE=str(tmp / "fi"),
    )
    return release.run({"runs": runs}, env, script=SCENARIO)


@pytest.fixture(scope="module")
def no_gpu(release: SglangRelease, tmp_path_factory: pytest.TempPathFactory) -> Result:
    runs = [
        {"options": {}},  # SGLang's defaults: Triton for every phase
        {"options": {}, "prefill_default": "flashinfer"},  # SGLang's own SM100 prefill default
        {"options": {"linear_attn_prefill_backend": "flashinfer"}},  # named
        # SGLang's own SM100 decode default (bf16 state): its ServerArgs resolution writes FlashInfer into the
        # decode field (that resolution, and jitguard's note of the options as given, need a real ServerArgs;
        # without that note jitguard reads the field as SGLang's own choice); an unset verify follows decode
        {"options": {"linear_attn_decode_backend": "flashinfer"}},
    ]
    return run(release, runs, tmp_path_factory.mktemp("sglang-0517"))


def test_jitguard_hooks_the_dict_layout(no_gpu: Result) -> None:
    result, output = no_gpu
    assert result["sglang"] == VERSION and result["has_table"]
    assert result["registered"] and result["layout"] == "process-wide table"
    assert "the SGLang plugin" not in output  # no fault of jitguard's own (it read the 0.5.16 globals before)
    table = "process-wide table"
    assert result["described"] == [["prefill", table], ["decode", table], ["verify", table]]


def test_triton_everywhere_is_untouched(no_gpu: Result) -> None:
    first = no_gpu[0]["runs"][0]
    assert first["error"] is None and first["backends"] == {
        "prefill": "triton",
        "decode": "triton",
        "verify": "triton",
    }


def test_sglangs_own_flashinfer_choices_move_to_triton_with_one_warning_each(no_gpu: Result) -> None:
    result, output = no_gpu
    for moved in (result["runs"][1], result["runs"][3]):
        assert moved["error"] is None
        assert moved["backends"] == {"prefill": "triton", "decode": "triton", "verify": "triton"}
    warnings = [line for line in output.splitlines() if FALLBACK in line]
    assert len(warnings) == 2 and all("[gpu-none]" in w for w in warnings)
    assert "linear attention prefill (not asked for by name)" in warnings[0]
    assert "linear attention decode, verify (not asked for by name)" in warnings[1]


def test_named_prefill_stops_with_the_cause_and_the_fix(no_gpu: Result) -> None:
    error = no_gpu[0]["runs"][2]["error"]
    assert error is not None and error["type"] == "ChoiceUnavailable"
    assert "gpu-none" in error["codes"]
    assert "(--linear-attn-prefill-backend flashinfer)" in error["message"]
    assert "serve with --linear-attn-prefill-backend triton" in error["message"]
