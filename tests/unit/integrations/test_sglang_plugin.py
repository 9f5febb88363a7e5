"""The SGLang plugin's per-process behaviour: what SGLang should use once it has chosen, one look at FlashInfer,
one warning per phase, a fault of its own never reaching SGLang, and the entry point where SGLang is absent or
jitguard is turned off."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from jitguard.decision.engine_verdicts import ChoiceUnavailable
from jitguard.decision.gdn_resolution import BackendStatus
from jitguard.errors import BackendUnavailable
from jitguard.findings.catalog import make
from jitguard.integrations import sglang as plugin


def status(*codes: str) -> BackendStatus:
    return BackendStatus.of("flashinfer", [make(code, backend="flashinfer") for code in codes])


NO_LIBCUDA = status("link-missing-libcuda")
NO_GPU = status("gpu-none", "link-missing-libcuda")
AUTO = {
    "linear_attn_backend": "triton",
    "linear_attn_prefill_backend": None,
    "linear_attn_decode_backend": None,
}
NAMED = {**AUTO, "linear_attn_prefill_backend": "flashinfer"}


@pytest.fixture
def judged_on() -> Iterator[Callable[[Callable[[], BackendStatus]], None]]:
    """The plugin's guard judges on the FlashInfer GDN status a test gives; afresh afterwards."""

    def use(gdn: Callable[[], BackendStatus]) -> None:
        plugin.guard().set_facts(gdn=gdn)

    yield use
    plugin.guard().set_facts()


def never() -> BackendStatus:
    raise AssertionError("FlashInfer must not be looked at")


@pytest.mark.parametrize("chosen", ["triton", "cutedsl", "flashkda"])
def test_a_choice_other_than_flashinfer_is_left_alone_without_looking(chosen: str, judged_on: Any) -> None:
    judged_on(never)
    assert plugin.choose({"prefill": chosen}, NAMED) == {"prefill": chosen}
    assert plugin.guard().looks == 0


def test_workable_flashinfer_stands(judged_on: Any) -> None:
    judged_on(status)
    assert plugin.choose({"prefill": "flashinfer"}, NAMED) == {"prefill": "flashinfer"}


def test_sglangs_own_doomed_flashinfer_goes_to_triton_with_one_line(
    judged_on: Any, caplog: pytest.LogCaptureFixture
) -> None:
    judged_on(lambda: NO_LIBCUDA)
    with caplog.at_level(logging.WARNING, logger="jitguard"):
        for _ in range(3):  # three model runners (a target and drafts) in one scheduler
            assert plugin.choose({"prefill": "flashinfer", "decode": "triton"}, AUTO) == {
                "prefill": "triton",
                "decode": "triton",
            }
    assert plugin.guard().looks == 1
    [line] = [r.getMessage() for r in caplog.records if "SGLang chose FlashInfer" in r.getMessage()]
    assert "[link-missing-libcuda]" in line and "Fix:" in line and "JITGUARD_DISABLE=1" in line


def test_phases_moved_together_are_said_in_one_line(judged_on: Any, caplog: pytest.LogCaptureFixture) -> None:
    judged_on(lambda: NO_GPU)
    with caplog.at_level(logging.WARNING, logger="jitguard"):
        moved = plugin.choose({"decode": "flashinfer", "verify": "flashinfer"}, AUTO)
    assert moved == {"decode": "triton", "verify": "triton"}
    [line] = [r.getMessage() for r in caplog.records]
    assert "SGLang chose FlashInfer linear attention decode, verify (not asked for by name)" in line


def test_doomed_flashinfer_asked_for_by_name_is_refused_in_sglangs_terms(judged_on: Any) -> None:
    judged_on(lambda: NO_GPU)
    with pytest.raises(ChoiceUnavailable) as caught:
        plugin.choose({"decode": "flashinfer"}, {**AUTO, "linear_attn_backend": "flashinfer"})
    error = caught.value
    assert isinstance(error, BackendUnavailable) and [f.code for f in error.findings] == ["gpu-none"]
    text = str(error)
    assert "(--linear-attn-backend flashinfer)" in text and "[gpu-none]" in text
    assert "--linear-attn-decode-backend triton" in text and "JITGUARD_DISABLE=1" in text


def test_guard_refuses_a_named_doomed_phase(judged_on: Any) -> None:
    judged_on(lambda: NO_LIBCUDA)
    with pytest.raises(ChoiceUnavailable, match="--linear-attn-prefill-backend flashinfer"):
        plugin.choose({"prefill": "flashinfer", "decode": "triton"}, NAMED)


def test_a_fault_in_jitguard_leaves_sglangs_choice_and_is_logged_once(
    judged_on: Any, caplog: pytest.LogCaptureFixture
) -> None:
    def broken() -> BackendStatus:
        raise RuntimeError("probe exploded")

    judged_on(broken)
    hook = plugin._fail_safe(lambda chosen: plugin.choose(chosen, AUTO))
    with caplog.at_level(logging.WARNING, logger="jitguard"):
        assert hook({"prefill": "flashinfer"}) == {"prefill": "flashinfer"}  # SGLang keeps its own choice
        assert hook({"prefill": "flashinfer"}) == {"prefill": "flashinfer"}
    [line] = [r.getMessage() for r in caplog.records]
    assert "[jitguard-fault]" in line and "RuntimeError: probe exploded" in line
    assert "Fix:" in line and "JITGUARD_DISABLE=1" in line


def test_a_fault_in_a_hook_leaves_every_later_choice_to_sglang(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(plugin, "_faulted", False)

    def broken(chosen: object) -> object:
        raise RuntimeError("hook exploded")

    hook = plugin._fail_safe(broken)
    with caplog.at_level(logging.WARNING, logger="jitguard"):
        assert hook({"prefill": "flashinfer"}) is None  # None: SGLang keeps its own result
        assert hook({"prefill": "flashinfer"}) is None
    [line] = [r.getMessage() for r in caplog.records]
    assert (
        "[jitguard-fault]" in line and "RuntimeError: hook exploded" in line and "JITGUARD_DISABLE=1" in line
    )
    assert plugin._faulted


def test_the_refusal_passes_through_the_fail_safe_wrapper(judged_on: Any) -> None:
    judged_on(lambda: NO_LIBCUDA)
    hook = plugin._fail_safe(lambda chosen: plugin.choose(chosen, NAMED))
    with pytest.raises(ChoiceUnavailable):
        hook({"prefill": "flashinfer"})


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
