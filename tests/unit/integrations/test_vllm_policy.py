"""The vLLM plugin's GDN prefill decision, alone: what vLLM should use once it has chosen, for every kind of
request, through the process's one ``ChoiceGuard``.

The real vLLM code around it is exercised in tests/real/vllm; here the statuses are plain data, built from
the catalog exactly as the GDN resolver builds them.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import pytest

from jitguard.decision.engine_verdicts import ChoiceUnavailable
from jitguard.decision.gdn_resolution import BackendStatus
from jitguard.errors import BackendUnavailable
from jitguard.findings.catalog import make
from jitguard.integrations.choices import ChoiceGuard
from jitguard.integrations.vllm import normalise_request
from jitguard.integrations.vllm.gdn_prefill import choose

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


def GdnGuard(status: Callable[[], BackendStatus]) -> ChoiceGuard:
    return ChoiceGuard("vLLM", gdn=status)


@pytest.mark.parametrize("requested", ["auto", "flashinfer"])
def test_usable_flashinfer_keeps_vllms_choice(requested: str) -> None:
    assert choose(GdnGuard(lambda: USABLE), requested, "flashinfer") == "flashinfer"


def test_auto_with_doomed_flashinfer_falls_back_to_triton(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="jitguard"):
        assert choose(GdnGuard(lambda: NO_LIBCUDA), "auto", "flashinfer") == "triton"
    [warning] = [r.getMessage() for r in caplog.records]
    assert "(--gdn-prefill-backend auto)" in warning and "[link-missing-libcuda]" in warning


def test_explicit_doomed_flashinfer_is_refused() -> None:
    with pytest.raises(ChoiceUnavailable):
        choose(GdnGuard(lambda: NO_LIBCUDA), "flashinfer", "flashinfer")


@pytest.mark.parametrize(
    ("requested", "chosen"),
    [("triton", "triton"), ("auto", "triton"), ("cutedsl", "cutedsl"), ("flashinfer", "triton")],
)
def test_any_choice_but_flashinfer_is_untouched_without_asking(requested: str, chosen: str) -> None:
    assert choose(GdnGuard(never), requested, chosen) == chosen


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
        chosen = [choose(guard, "auto", "flashinfer") for _ in range(48)]  # one per GDN layer
    assert chosen == ["triton"] * 48
    assert len(asked) == 1
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert "[link-missing-libcuda]" in warnings[0].getMessage() and "Fix:" in warnings[0].getMessage()


def test_guard_refuses_explicit_flashinfer_with_vllm_terms() -> None:
    with pytest.raises(ChoiceUnavailable) as caught:
        choose(GdnGuard(lambda: NO_LIBCUDA), "flashinfer", "flashinfer")
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
        assert choose(guard, "flashinfer", "flashinfer") == "flashinfer"
        assert choose(guard, "auto", "flashinfer") == "flashinfer"
    assert len(caplog.records) == 1 and "probe exploded" in caplog.records[0].getMessage()


def test_usable_flashinfer_is_announced_once_at_info(caplog: pytest.LogCaptureFixture) -> None:
    guard = GdnGuard(lambda: USABLE)
    with caplog.at_level(logging.INFO, logger="jitguard"):
        for _ in range(3):
            assert choose(guard, "auto", "flashinfer") == "flashinfer"
    assert [r.levelno for r in caplog.records] == [logging.INFO]


def test_jitguard_lines_go_to_vllms_handler_once_vllm_has_one(monkeypatch: pytest.MonkeyPatch) -> None:
    import io

    from jitguard.integrations.vllm.sites import route_logs

    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logging.Formatter("VLLMFMT %(message)s"))
    vllm_logger, ours = logging.getLogger("vllm"), logging.getLogger("jitguard")
    monkeypatch.setattr(logging.getLogger(), "handlers", [])
    monkeypatch.setattr(vllm_logger, "handlers", [])
    monkeypatch.setattr(ours, "handlers", [])
    monkeypatch.setattr(ours, "propagate", True)
    monkeypatch.setattr(ours, "level", logging.NOTSET)
    route_logs()  # vLLM has not configured its logging yet: nothing to join
    assert ours.handlers == []
    monkeypatch.setattr(vllm_logger, "handlers", [handler])
    monkeypatch.setattr(vllm_logger, "level", logging.INFO)
    choose(GdnGuard(lambda: NO_LIBCUDA), "auto", "flashinfer")
    route_logs()  # again: idempotent
    assert ours.handlers == [handler]
    assert stream.getvalue().count("VLLMFMT jitguard: vLLM chose FlashInfer") == 1
