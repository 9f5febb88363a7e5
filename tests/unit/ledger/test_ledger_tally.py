"""This process's tally: counts only inside an engine start, a compile in a covered layer is a must-hit miss
(an error under JITGUARD_WARM=require), and the start id travels to the processes started from here."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from collections.abc import Iterator

import pytest

from jitguard.ledger import tally
from jitguard.ledger.record import Warm


@pytest.fixture(autouse=True)
def _fresh(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.delenv(tally.START_ID, raising=False)
    tally.forget()
    yield
    tally.forget()


def test_outside_an_engine_start_nothing_is_counted() -> None:
    tally.count("triton", "compiled")
    tally.phase("facts", 1.0)
    assert tally.current() is None


def test_a_compile_in_a_covered_layer_is_an_error_under_require(caplog: pytest.LogCaptureFixture) -> None:
    current = tally.begin("vllm")
    current.set_warm(Warm("require", "restored", "default", ("triton",)))
    with caplog.at_level(logging.ERROR, logger="jitguard.ledger"):
        tally.count(
            "triton", "compiled", what="add_kernel", cause="Triton's cache has no kernel for its key 1f"
        )
        tally.count("triton", "cached", n=5)
        tally.count("tilelang", "compiled", what="gemm")  # not covered: counted, not a miss
    (error,) = caplog.records
    assert "must-hit miss: Triton kernels compiled add_kernel" in error.getMessage()
    assert "no kernel for its key 1f" in error.getMessage()
    record = current.record
    assert [m.what for m in record.misses] == ["add_kernel"]
    assert record.layers["triton"].compiled == 1 and record.layers["triton"].cached == 5
    assert record.layers["tilelang"].compiled == 1


def test_under_auto_a_miss_is_recorded_without_an_error(caplog: pytest.LogCaptureFixture) -> None:
    current = tally.begin("vllm")
    current.set_warm(Warm("auto", "restored", "default", ("inductor",)))
    with caplog.at_level(logging.ERROR, logger="jitguard.ledger"):
        tally.count("inductor", "compiled", what="1 FX graph(s)")
    assert caplog.records == []
    assert len(current.record.misses) == 1


def test_a_compile_after_ready_is_counted_late_and_rewrites_the_record() -> None:
    current = tally.begin("vllm")
    written: list[int] = []
    current.mark_ready("engine-core")
    current.on_change = lambda: written.append(current.record.layers["triton"].after_ready)
    tally.count("triton", "compiled", what="kernel_unified_attention")
    assert written == [1]


def test_the_start_id_is_made_once_and_inherited_by_child_processes() -> None:
    first = tally.begin("vllm").record.start_id
    assert os.environ[tally.START_ID] == first
    child = subprocess.run(
        [
            sys.executable,
            "-c",
            "from jitguard.ledger import tally; print(tally.begin('vllm').record.start_id)",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    assert child.stdout.strip() == first


def test_a_malformed_start_id_is_replaced(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(tally.START_ID, "../../etc")
    made = tally.begin("vllm").record.start_id
    assert made != "../../etc" and "/" not in made


def test_must_hit_errors_in_the_log_are_bounded_the_ledger_keeps_them(
    caplog: pytest.LogCaptureFixture,
) -> None:
    current = tally.begin("vllm")
    current.set_warm(Warm("require", "restored", "default", ("triton",)))
    with caplog.at_level(logging.ERROR, logger="jitguard.ledger"):
        for n in range(15):
            tally.count("triton", "compiled", what=f"kernel_{n}")
    assert len(caplog.records) == tally.MAX_LOGGED + 1
    assert "further must-hit misses are not logged" in caplog.records[-1].getMessage()
    assert len(current.record.misses) == 15


def test_a_cause_is_worked_out_only_for_a_miss() -> None:
    current = tally.begin("vllm")
    current.set_warm(Warm("auto", "restored", "default", ("triton",)))
    asked: list[str] = []

    def cause(name: str) -> str:
        asked.append(name)
        return f"why {name}"

    tally.count("inductor", "compiled", what="g", cause=lambda: cause("g"))  # not covered: no miss
    tally.count("triton", "cached", what="k", cause=lambda: cause("k"))
    tally.count("triton", "compiled", what="add", cause=lambda: cause("add"))
    assert asked == ["add"]
    assert [m.cause for m in current.record.misses] == ["why add"]
