"""The vLLM plugin's decision, alone: what vLLM should use once it has chosen, for every kind of request.

The real vLLM code around it is exercised in tests/real/vllm; here the statuses are plain data, built from
the catalog exactly as the GDN resolver builds them.
"""

from __future__ import annotations

import logging

import pytest

from jitguard.decision.gdn import BackendStatus
from jitguard.errors import BackendUnavailable
from jitguard.findings.catalog import make
from jitguard.integrations.vllm import GdnGuard, VllmBackendUnavailable, decide, normalise_request

USABLE = BackendStatus("flashinfer", True, (make("gdn-prebuilt-available", backend="flashinfer"),))
NO_LIBCUDA = BackendStatus(
    "flashinfer",
    False,
    (
        make("link-missing-libcuda", backend="flashinfer", evidence=["cannot find -lcuda"]),
        make("gdn-prebuilt-available", backend="flashinfer"),
    ),
)


def never() -> BackendStatus:
    raise AssertionError("the status must not be asked for")


@pytest.mark.parametrize("requested", ["auto", "flashinfer"])
def test_usable_flashinfer_keeps_vllms_choice(requested: str) -> None:
    verdict = decide(requested, "flashinfer", lambda: USABLE)
    assert (verdict.backend, verdict.action) == ("flashinfer", "keep")


def test_auto_with_doomed_flashinfer_falls_back_to_triton() -> None:
    verdict = decide("auto", "flashinfer", lambda: NO_LIBCUDA)
    assert (verdict.backend, verdict.action) == ("triton", "fallback")
    assert verdict.primary is not None and verdict.primary.code == "link-missing-libcuda"


def test_explicit_doomed_flashinfer_is_refused() -> None:
    verdict = decide("flashinfer", "flashinfer", lambda: NO_LIBCUDA)
    assert verdict.action == "refuse"


@pytest.mark.parametrize(
    ("requested", "chosen"),
    [("triton", "triton"), ("auto", "triton"), ("cutedsl", "cutedsl"), ("flashinfer", "triton")],
)
def test_any_choice_but_flashinfer_is_untouched_without_asking(requested: str, chosen: str) -> None:
    verdict = decide(requested, chosen, never)
    assert (verdict.backend, verdict.action) == (chosen, "keep")


@pytest.mark.parametrize(
    ("value", "expected"), [(None, "auto"), ("", "auto"), (" FlashInfer ", "flashinfer")]
)
def test_request_is_read_the_way_vllm_reads_it(value: object, expected: str) -> None:
    assert normalise_request(value) == expected


def test_guard_asks_once_and_warns_once_per_process(caplog: pytest.LogCaptureFixture) -> None:
    asked = []

    def status() -> BackendStatus:
        asked.append(1)
        return NO_LIBCUDA

    guard = GdnGuard(status)
    with caplog.at_level(logging.INFO, logger="jitguard"):
        chosen = [guard.choose("auto", "flashinfer") for _ in range(48)]  # one per GDN layer
    assert chosen == ["triton"] * 48
    assert len(asked) == 1
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert "[link-missing-libcuda]" in warnings[0].getMessage() and "Fix:" in warnings[0].getMessage()


def test_guard_refuses_explicit_flashinfer_with_vllm_terms() -> None:
    with pytest.raises(VllmBackendUnavailable) as caught:
        GdnGuard(lambda: NO_LIBCUDA).choose("flashinfer", "flashinfer")
    assert isinstance(caught.value, BackendUnavailable)
    message = str(caught.value)
    assert "[link-missing-libcuda]" in message
    assert "--gdn-prefill-backend triton" in message and "JITGUARD_DISABLE=1" in message
    assert caught.value.findings[0].code == "link-missing-libcuda"


def test_a_crash_in_jitguards_checks_leaves_vllms_choice(caplog: pytest.LogCaptureFixture) -> None:
    def broken() -> BackendStatus:
        raise RuntimeError("probe exploded")

    guard = GdnGuard(broken)
    with caplog.at_level(logging.WARNING, logger="jitguard"):
        assert guard.choose("flashinfer", "flashinfer") == "flashinfer"
        assert guard.choose("auto", "flashinfer") == "flashinfer"
    assert len(caplog.records) == 1 and "probe exploded" in caplog.records[0].getMessage()


def test_usable_flashinfer_is_announced_once_at_info(caplog: pytest.LogCaptureFixture) -> None:
    guard = GdnGuard(lambda: USABLE)
    with caplog.at_level(logging.INFO, logger="jitguard"):
        for _ in range(3):
            assert guard.choose("auto", "flashinfer") == "flashinfer"
    assert [r.levelno for r in caplog.records] == [logging.INFO]


def test_jitguard_lines_go_to_vllms_handler_once_vllm_has_one(monkeypatch: pytest.MonkeyPatch) -> None:
    import io

    from jitguard.integrations.vllm import _route_logs

    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logging.Formatter("VLLMFMT %(message)s"))
    vllm_logger, ours = logging.getLogger("vllm"), logging.getLogger("jitguard")
    monkeypatch.setattr(logging.getLogger(), "handlers", [])
    monkeypatch.setattr(vllm_logger, "handlers", [])
    monkeypatch.setattr(ours, "handlers", [])
    monkeypatch.setattr(ours, "propagate", True)
    monkeypatch.setattr(ours, "level", logging.NOTSET)
    _route_logs()  # vLLM has not configured its logging yet: nothing to join
    assert ours.handlers == []
    monkeypatch.setattr(vllm_logger, "handlers", [handler])
    monkeypatch.setattr(vllm_logger, "level", logging.INFO)
    GdnGuard(lambda: NO_LIBCUDA).choose("auto", "flashinfer")
    _route_logs()  # again: idempotent
    assert ours.handlers == [handler]
    assert stream.getvalue().count("VLLMFMT jitguard: vLLM chose FlashInfer") == 1
