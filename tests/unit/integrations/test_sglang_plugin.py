"""The SGLang plugin's per-process behaviour: one look at FlashInfer, one warning per phase, a fault of its own
never reaching SGLang, and the entry point where SGLang is absent or jitguard is turned off."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import textwrap

import pytest

from jitguard.decision.gdn import BackendStatus
from jitguard.findings.catalog import make
from jitguard.integrations import sglang as plugin
from jitguard.integrations.sglang_choice import FlashInferHere, SglangBackendUnavailable

NO_LIBCUDA = FlashInferHere(
    BackendStatus("flashinfer", False, (make("link-missing-libcuda", backend="flashinfer"),))
)
AUTO = {
    "linear_attn_backend": "triton",
    "linear_attn_prefill_backend": None,
    "linear_attn_decode_backend": None,
}
NAMED = {**AUTO, "linear_attn_prefill_backend": "flashinfer"}


def test_guard_looks_once_and_warns_once_per_phase(caplog: pytest.LogCaptureFixture) -> None:
    guard = plugin.LinearAttnGuard(lookup=lambda: NO_LIBCUDA)
    with caplog.at_level(logging.WARNING, logger="jitguard"):
        for _ in range(3):  # three model runners (a target and drafts) in one scheduler
            assert guard.choose({"prefill": "flashinfer", "decode": "triton"}, AUTO) == {
                "prefill": "triton",
                "decode": "triton",
            }
    assert guard.looks == 1
    assert len([r for r in caplog.records if "SGLang chose FlashInfer" in r.getMessage()]) == 1


def test_guard_refuses_a_named_doomed_phase() -> None:
    guard = plugin.LinearAttnGuard(lookup=lambda: NO_LIBCUDA)
    with pytest.raises(SglangBackendUnavailable, match="--linear-attn-prefill-backend flashinfer"):
        guard.choose({"prefill": "flashinfer", "decode": "triton"}, NAMED)


def test_a_fault_in_jitguard_leaves_sglangs_choice_and_is_logged_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    def broken() -> FlashInferHere:
        raise RuntimeError("probe exploded")

    plugin.guard().reset(lookup=broken)
    hook = plugin._fail_safe(lambda chosen: plugin.guard().choose(chosen, AUTO))
    try:
        with caplog.at_level(logging.WARNING, logger="jitguard"):
            assert hook({"prefill": "flashinfer"}) is None  # None: SGLang keeps its own result
            assert hook({"prefill": "flashinfer"}) is None
        [line] = [r.getMessage() for r in caplog.records]
        assert "[jitguard-fault]" in line and "RuntimeError: probe exploded" in line
        assert "Fix:" in line and "JITGUARD_DISABLE=1" in line
    finally:
        plugin.guard().reset()


def test_the_refusal_passes_through_the_fail_safe_wrapper() -> None:
    plugin.guard().reset(lookup=lambda: NO_LIBCUDA)
    hook = plugin._fail_safe(lambda chosen: plugin.guard().choose(chosen, NAMED))
    try:
        with pytest.raises(SglangBackendUnavailable):
            hook({"prefill": "flashinfer"})
    finally:
        plugin.guard().reset()


# SGLang's loader calls the entry point in a process where `import sglang` fails here; logging at DEBUG
# to the terminal, so anything the plugin printed or logged would show. Outcomes are exit codes.
ENTRY_POINT = textwrap.dedent(
    """
    import importlib.abc, importlib.metadata, logging, sys

    class NoSglang(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name == "sglang" or name.startswith("sglang."):
                raise ModuleNotFoundError(f"No module named {name!r}", name=name)

    if sys.argv[1] == "absent":
        sys.meta_path.insert(0, NoSglang())
    logging.basicConfig(level=logging.DEBUG)
    [ep] = [e for e in importlib.metadata.entry_points(group="sglang.srt.plugins") if e.name == "jitguard"]
    register = ep.load()
    if register() is not False or register() is not False:
        sys.exit(3)
    heavy = sorted(m for m in ("torch", "flashinfer", "sglang", "triton") if m in sys.modules)
    sys.exit(4 if heavy else 0)
    """
)


@pytest.mark.parametrize(("situation", "env"), [("absent", {}), ("disabled", {"JITGUARD_DISABLE": "1"})])
def test_entry_point_is_cheap_and_silent(situation: str, env: dict[str, str]) -> None:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("JITGUARD_")}
    proc = subprocess.run(
        [sys.executable, "-c", ENTRY_POINT, situation],
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
        env={**clean, **env},
    )
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, "", "")


def test_a_malformed_setting_turns_the_plugin_off_with_one_line(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(plugin, "sglang_installed", lambda: True)
    monkeypatch.setenv("JITGUARD_DISABLE", "sometimes")
    with caplog.at_level(logging.DEBUG, logger="jitguard"):
        assert plugin.register() is False
    [record] = caplog.records
    assert "stays off" in record.getMessage() and "JITGUARD_DISABLE" in record.getMessage()
    assert not plugin.is_registered()
