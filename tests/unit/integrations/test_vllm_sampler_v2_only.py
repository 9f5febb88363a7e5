"""The sampler as vLLM 0.34 shapes it, on a stand-in ``vllm`` package: the V1 model runner and its
``TopKTopPSampler`` gone, no ``random_sample`` next to ``flashinfer_sample``, and a predicate that asks
``has_flashinfer()`` before anything else. (The real 0.34 sources are read in tests/real/test_release_report.py;
the real code runs in tests/real/vllm with ``JITGUARD_VLLM_VERSIONS=0.34.0``.)"""

from __future__ import annotations

import importlib
import logging
import sys
from pathlib import Path

import pytest

from jitguard.decision.engine_verdicts import (
    KERNELS,
    SAMPLER,
    Choice,
    ChoiceStatus,
    ChoiceUnavailable,
    assess,
)
from jitguard.findings.catalog import make
from jitguard.integrations import vllm as plugin
from jitguard.integrations.vllm.sampler import draw
from stand_in_vllm import write_vllm

SAMPLER_PATH = "vllm/v1/sample/ops/topk_topp_sampler.py"
SAMPLER_SOURCE = """
import os

from vllm.utils.flashinfer import has_flashinfer

CALLS = []  # every call that reached FlashInfer's sampler


def flashinfer_sampler_supported():
    # 0.34's order: the umbrella gate first; an explicit VLLM_USE_FLASHINFER_SAMPLER=1 makes a "no" an error.
    if has_flashinfer():
        return True
    if os.environ.get("VLLM_USE_FLASHINFER_SAMPLER") == "1":
        raise RuntimeError("vLLM: FlashInfer top-p/top-k sampling unavailable: FlashInfer kernels are disabled")
    return False


def flashinfer_sample(logits, k, p, generators={}):
    CALLS.append(logits)
    if FAIL_TO_BUILD:
        from jitguard.errors import BuildFailed
        from jitguard.findings.catalog import make

        raise BuildFailed("sampling", [make("build-failed", backend="flashinfer")], None)
    return "flashinfer"


def apply_top_k_top_p(logits, k, p):
    # keep each row's k largest logits (k: one per row), mask the rest, in place as vLLM may
    kth = logits.topk(int(k.max()), dim=-1).values.gather(1, (k - 1).long().unsqueeze(1))
    return logits.masked_fill_(logits < kth, float("-inf"))


FAIL_TO_BUILD = False
"""
V2_PATH = "vllm/v1/worker/gpu/sample/sampler.py"
V2_SOURCE = """
from vllm.v1.sample.ops.topk_topp_sampler import flashinfer_sample, flashinfer_sampler_supported


class Sampler:
    def __init__(self):
        self.use_flashinfer = flashinfer_sampler_supported()

    def sample(self, logits, k, p):
        if self.use_flashinfer:
            return flashinfer_sample(logits, k, p)
        return "native"
"""
GATES_PATH = "vllm/utils/flashinfer.py"
GATES_SOURCE = """
def has_flashinfer():
    return True

def has_flashinfer_moe():
    return False

has_flashinfer_cutlass_fused_moe = has_flashinfer_trtllm_fused_moe = has_flashinfer_moe
"""
DOOMED = [make("link-missing-libcuda", backend="flashinfer", evidence=["cannot find -lcuda"])]


def write(root: Path, *, fail_to_build: bool = False) -> None:
    source = SAMPLER_SOURCE.replace("FAIL_TO_BUILD = False", f"FAIL_TO_BUILD = {fail_to_build}")
    write_vllm(root, {SAMPLER_PATH: source, V2_PATH: V2_SOURCE, GATES_PATH: GATES_SOURCE})


def register(blocked: tuple[Choice, ...]) -> None:
    """The plugin, with ``blocked`` choices failing here and every other one passing pre-flight."""

    def status(choice: Choice) -> ChoiceStatus:
        return assess(choice, DOOMED if choice in blocked else [])

    assert plugin.register()
    plugin.guard().set_facts(plugin.engine_facts(), status)


def warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]


def test_a_release_without_the_v1_sampler_is_no_moved_layout(
    stand_in: Path, caplog: pytest.LogCaptureFixture
) -> None:
    write(stand_in)
    register(blocked=(SAMPLER,))
    with caplog.at_level(logging.WARNING, logger="jitguard"):
        module = importlib.import_module("vllm.v1.sample.ops.topk_topp_sampler")
        v2 = importlib.import_module("vllm.v1.worker.gpu.sample.sampler")
        assert v2.Sampler().use_flashinfer is False
    assert not hasattr(module, "TopKTopPSampler")
    [warned] = warnings(caplog)  # the verdict, and no "[jitguard-fault] ... has no TopKTopPSampler.__init__"
    assert "FlashInfer top-k/top-p sampler" in warned and "jitguard-fault" not in warned


def test_the_umbrella_verdict_does_not_turn_off_a_sampler_that_can_work(
    stand_in: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # Another FlashInfer kernel cannot work here (its build failed), FlashInfer's sampling can: asked inside
    # the sampler's predicate, has_flashinfer() answers as vLLM does, and the sampler is judged on its own.
    write(stand_in)
    register(blocked=(KERNELS,))
    gates = importlib.import_module("vllm.utils.flashinfer")
    v2 = importlib.import_module("vllm.v1.worker.gpu.sample.sampler")
    with caplog.at_level(logging.WARNING, logger="jitguard"):
        assert v2.Sampler().use_flashinfer is True
        monkeypatch.setenv("VLLM_USE_FLASHINFER_SAMPLER", "1")
        assert v2.Sampler().use_flashinfer is True  # vLLM's own "kernels are disabled" error is not raised
        assert not warnings(caplog)
        assert gates.has_flashinfer() is False  # asked on its own, the umbrella verdict stands
    [warned] = warnings(caplog)
    assert "FlashInfer's other JIT kernels" in warned


def test_a_named_sampler_that_cannot_work_stops_with_jitguards_cause_not_vllms(
    stand_in: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write(stand_in)
    register(blocked=(SAMPLER, KERNELS))
    v2 = importlib.import_module("vllm.v1.worker.gpu.sample.sampler")
    monkeypatch.setenv("VLLM_USE_FLASHINFER_SAMPLER", "1")
    with pytest.raises(ChoiceUnavailable, match="VLLM_USE_FLASHINFER_SAMPLER=1") as raised:
        v2.Sampler()
    assert "link-missing-libcuda" in str(raised.value)


def test_a_first_use_that_fails_draws_from_the_top_k_without_random_sample(
    stand_in: Path, caplog: pytest.LogCaptureFixture
) -> None:
    import torch

    write(stand_in, fail_to_build=True)
    register(blocked=())
    v2 = importlib.import_module("vllm.v1.worker.gpu.sample.sampler")
    module = sys.modules["vllm.v1.sample.ops.topk_topp_sampler"]
    assert not hasattr(module, "random_sample")
    sampler = v2.Sampler()
    assert sampler.use_flashinfer is True
    torch.manual_seed(0)
    logits = torch.randn(8, 50)
    before = logits.clone()
    k = torch.full((8,), 2)
    with caplog.at_level(logging.WARNING, logger="jitguard"):
        batches = [sampler.sample(logits, k, None) for _ in range(20)]
    top = logits.topk(2, dim=-1).indices
    assert all(t.shape == (8,) and all(int(x) in top[i].tolist() for i, x in enumerate(t)) for t in batches)
    assert len({int(t[0]) for t in batches}) == 2  # drawn, not the argmax
    assert torch.equal(logits, before) and len(module.CALLS) == 1
    [warned] = warnings(caplog)
    assert "failed on first use: [build-failed]" in warned


def test_a_draw_follows_each_rows_distribution_and_a_seeded_row_repeats() -> None:
    import torch

    probs = torch.tensor([[0.0, 1.0, 0.0], [0.5, 0.0, 0.5], [0.25, 0.25, 0.5]])
    torch.manual_seed(1)
    rows = torch.stack([draw(probs, {}) for _ in range(400)])
    assert rows[:, 0].eq(1).all() and not rows[:, 1].eq(1).any()
    assert 120 < int(rows[:, 2].eq(2).sum()) < 280  # about half of 400
    seeded = [draw(probs, {2: torch.Generator().manual_seed(7)})[2] for _ in range(5)]
    assert len({int(t) for t in seeded}) == 1
