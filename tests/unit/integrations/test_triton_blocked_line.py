"""The engine plugins' one line when the Triton/FLA path they take cannot build Triton's launcher: it names
Triton's block and, when FlashInfer was the engine's first choice, FlashInfer's, each with its fix, once per
process, after the "using Triton instead" warning. The Triton facts are real: the stub probe run with no
compiler reachable (an empty PATH, CC naming nothing)."""

from __future__ import annotations

import logging
import os
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from jitguard.boundary.process_facts import ProcessFacts
from jitguard.decision.gdn_resolution import BackendStatus
from jitguard.facts import triton_jit
from jitguard.findings.catalog import make
from jitguard.integrations import sglang as plugin
from jitguard.integrations.choices import ChoiceGuard
from jitguard.integrations.triton_blocked import blocked_message, blocks
from jitguard.integrations.vllm.gdn_prefill import choose

NO_LIBCUDA = make("link-missing-libcuda", backend="flashinfer", evidence=["cannot find -lcuda"])
SGLANG_AUTO = {
    "linear_attn_backend": "triton",
    "linear_attn_prefill_backend": None,
    "linear_attn_decode_backend": None,
}


@pytest.fixture
def no_compiler(tmp_path: Path) -> Any:
    """Facts of a host where Triton finds no C compiler (and no GPU, so libcuda is not judged)."""
    triton_jit.forget()
    empty = tmp_path / "bin"
    empty.mkdir()
    env = {**os.environ, "PATH": str(empty), "CC": "/nonexistent"}
    jit = triton_jit.probe("3.6.0", env, ldconfig=str(tmp_path / "no-ldconfig"))
    return SimpleNamespace(triton_jit=jit, gpu=SimpleNamespace(present=False), fingerprint="test-host")


def test_the_line_names_both_blocks_and_both_fixes(no_compiler: Any) -> None:
    triton = blocks(no_compiler)
    assert [f.code for f in triton] == ["triton-cc-missing"]
    line = blocked_message("vLLM", "GDN prefill", triton, NO_LIBCUDA)
    assert "[triton-cc-missing]" in line and "[link-missing-libcuda]" in line
    assert "apt-get install -y gcc" in line or "export CC=" in line
    assert NO_LIBCUDA.fixes[0].command in line
    assert "\n" not in line


def test_no_line_where_triton_can_build(tmp_path: Path) -> None:
    triton_jit.forget()
    jit = triton_jit.probe("3.6.0", dict(os.environ), ldconfig=str(tmp_path / "no-ldconfig"))
    facts = SimpleNamespace(triton_jit=jit, gpu=SimpleNamespace(present=False))
    assert blocks(facts) == []
    assert blocks(SimpleNamespace(triton_jit=None, gpu=SimpleNamespace(present=True))) == []  # no triton


def test_vllm_fallback_to_a_blocked_triton_is_one_error_line(
    no_compiler: Any, caplog: pytest.LogCaptureFixture
) -> None:
    status = BackendStatus("flashinfer", False, (NO_LIBCUDA,))
    guard = ChoiceGuard("vLLM", ProcessFacts(lambda: no_compiler), gdn=lambda: status)
    with caplog.at_level(logging.INFO, logger="jitguard"):
        assert [choose(guard, "auto", "flashinfer") for _ in range(4)] == ["triton"] * 4
    said = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert [r.levelno for r in said] == [logging.WARNING, logging.ERROR]  # "uses Triton/FLA", then why not
    assert "[triton-cc-missing]" in said[1].getMessage() and "[link-missing-libcuda]" in said[1].getMessage()


def test_sglang_fallback_to_a_blocked_triton_is_one_error_line(
    no_compiler: Any, caplog: pytest.LogCaptureFixture
) -> None:
    status = BackendStatus("flashinfer", False, (NO_LIBCUDA,))
    plugin.guard().set_facts(ProcessFacts(lambda: no_compiler), gdn=lambda: status)
    try:
        with caplog.at_level(logging.WARNING, logger="jitguard"):
            for _ in range(3):
                plugin.choose({"prefill": "flashinfer", "decode": "triton"}, SGLANG_AUTO)
    finally:
        plugin.guard().set_facts()
    warning, record = caplog.records
    assert warning.getMessage().startswith("jitguard: SGLang chose FlashInfer")
    assert record.levelno == logging.ERROR and record.getMessage().startswith("jitguard: SGLang runs")
    assert "[triton-cc-missing]" in record.getMessage() and "[link-missing-libcuda]" in record.getMessage()
