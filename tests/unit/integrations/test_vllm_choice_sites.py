"""Corner cases of the sampler, attention and has_flashinfer sites, on a stand-in ``vllm`` package written to
a temp dir (the real releases are tested in tests/real/vllm; these are the shapes they do not have: a
predicate imported by name before the plugin, a method that moved, a check that crashes)."""

from __future__ import annotations

import importlib
import logging
import sys
from pathlib import Path

import pytest

from jitguard.decision.engine_verdicts import Choice, ChoiceStatus, ChoiceUnavailable, assess
from jitguard.findings.catalog import make
from jitguard.integrations import vllm as plugin
from stand_in_vllm import write_vllm

SAMPLER_PATH = "vllm/v1/sample/ops/topk_topp_sampler.py"
SAMPLER_SOURCE = """
CALLS = []  # every call that reached FlashInfer's sampler


def flashinfer_sampler_supported():
    return CHOOSE_FLASHINFER


def flashinfer_sample(logits, k, p, generators={}):
    CALLS.append(logits)
    return "flashinfer"


def apply_top_k_top_p(logits, k, p):
    return logits


def random_sample(probs, generators):
    return probs.argmax(dim=-1)


class TopKTopPSampler:
    def __init__(self):
        self.forward = self.forward_cuda if flashinfer_sampler_supported() else self.forward_native

    def forward_cuda(self, logits=None):
        return flashinfer_sample(logits, None, None)

    def forward_native(self, logits=None):
        return "pytorch"

CHOOSE_FLASHINFER = True
"""
# vLLM 0.17 - 0.22: the choice inline in __init__, no predicate.
INLINE_SAMPLER_SOURCE = SAMPLER_SOURCE.replace(
    "if flashinfer_sampler_supported() else", "if CHOOSE_FLASHINFER else"
).replace("def flashinfer_sampler_supported():\n    return CHOOSE_FLASHINFER\n", "")
# A failing first use: FlashInfer's sampling build fails in jitguard's build hook.
FAILING_SAMPLE = """
def flashinfer_sample(logits, k, p, generators={}):
    from jitguard.errors import BuildFailed
    from jitguard.findings.catalog import make
    CALLS.append(logits)
    raise BuildFailed('sampling', [make('build-failed', backend='flashinfer')], None)
"""
# The V2 model runner's sampler (0.23+): both names imported from topk_topp_sampler, no TopKTopPSampler.
V2_PATH = "vllm/v1/worker/gpu/sample/sampler.py"
V2_SOURCE = """
from vllm.v1.sample.ops.topk_topp_sampler import flashinfer_sample, flashinfer_sampler_supported


class Sampler:
    def __init__(self):
        self.use_flashinfer = flashinfer_sampler_supported()

    def sample(self, logits):
        if self.use_flashinfer:
            return flashinfer_sample(logits, None, None)
        return "native"
"""


def failing(source: str) -> str:
    start = source.index("def flashinfer_sample(")
    end = source.index("def apply_top_k_top_p(")
    return source[:start] + FAILING_SAMPLE.lstrip() + "\n\n" + source[end:]


ATTENTION_PATH = "vllm/v1/attention/backends/flashinfer.py"
ATTENTION_SOURCE = """
class AttentionBackend:
    @classmethod
    def validate_configuration(cls, head_size, dtype, kv_cache_dtype, **kwargs):
        return [] if head_size == 128 else ["head_size not supported"]

class FlashInferBackend(AttentionBackend):
    pass
"""
GATES_PATH = "vllm/utils/flashinfer.py"
GATES_SOURCE = """
def has_flashinfer():
    return True

def has_flashinfer_moe():
    return has_flashinfer()

def has_flashinfer_cutlass_fused_moe():
    return has_flashinfer_moe()

def has_flashinfer_trtllm_fused_moe():
    return False
"""
USER_SOURCE = "from vllm.utils.flashinfer import has_flashinfer\n"
DOOMED = [make("link-missing-libcuda", backend="flashinfer", evidence=["cannot find -lcuda"])]


def doomed(choice: Choice) -> ChoiceStatus:
    return assess(choice, DOOMED)


def register(provider: object = doomed) -> None:
    assert plugin.register()
    plugin.guard().set_facts(plugin.engine_facts(), provider)  # type: ignore[arg-type]


def warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]


def test_a_doomed_sampler_takes_pytorch_and_a_named_one_stops(
    stand_in: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    write_vllm(stand_in, {SAMPLER_PATH: SAMPLER_SOURCE})
    register()
    module = importlib.import_module("vllm.v1.sample.ops.topk_topp_sampler")
    with caplog.at_level(logging.INFO, logger="jitguard"):
        assert [module.TopKTopPSampler().forward() for _ in range(3)] == ["pytorch"] * 3
    [warned] = warnings(caplog)
    assert "FlashInfer top-k/top-p sampler" in warned and "[link-missing-libcuda]" in warned
    monkeypatch.setenv("VLLM_USE_FLASHINFER_SAMPLER", "1")
    with pytest.raises(ChoiceUnavailable, match="VLLM_USE_FLASHINFER_SAMPLER=1"):
        module.TopKTopPSampler()


def test_a_sampler_vllm_did_not_give_flashinfer_is_never_judged(stand_in: Path) -> None:
    write_vllm(
        stand_in,
        {SAMPLER_PATH: SAMPLER_SOURCE.replace("CHOOSE_FLASHINFER = True", "CHOOSE_FLASHINFER = False")},
    )

    def never(choice: Choice) -> ChoiceStatus:
        raise AssertionError("the status must not be asked for")

    register(never)
    module = importlib.import_module("vllm.v1.sample.ops.topk_topp_sampler")
    assert module.TopKTopPSampler().forward() == "pytorch"


def test_attention_gets_a_reason_and_an_inherited_method_is_inherited_again(stand_in: Path) -> None:
    write_vllm(stand_in, {ATTENTION_PATH: ATTENTION_SOURCE})
    module = importlib.import_module("vllm.v1.attention.backends.flashinfer")
    register()
    backend = module.FlashInferBackend
    reasons = backend.validate_configuration(128, "bfloat16", "auto")
    assert len(reasons) == 1 and "FlashInfer attention cannot work here" in reasons[0]
    assert "FP8 KV cache" in backend.validate_configuration(128, "bfloat16", "fp8_e4m3")[0]
    assert backend.validate_configuration(64, "bfloat16", "auto") == ["head_size not supported"]  # vLLM's own
    plugin.unregister()
    assert "validate_configuration" not in backend.__dict__
    assert backend.validate_configuration(128, "bfloat16", "auto") == []


def test_a_predicate_imported_by_name_before_the_plugin_is_rebound_and_restored(stand_in: Path) -> None:
    write_vllm(stand_in, {GATES_PATH: GATES_SOURCE, "vllm/user.py": USER_SOURCE})
    user = importlib.import_module("vllm.user")
    original = user.has_flashinfer
    register()
    gates = sys.modules["vllm.utils.flashinfer"]
    assert user.has_flashinfer is gates.has_flashinfer is not original
    assert user.has_flashinfer() is False
    assert gates.has_flashinfer_cutlass_fused_moe() is False
    assert gates.has_flashinfer_trtllm_fused_moe() is False  # vLLM's own False stays False
    plugin.unregister()
    assert user.has_flashinfer is original and user.has_flashinfer() is True


CONFIG_SOURCE = """
class KernelConfig:
    moe_backend = "flashinfer_cutlass"

class VllmConfig:
    kernel_config = KernelConfig()

def get_current_vllm_config_or_none():
    return VllmConfig()
"""


def test_a_named_moe_backend_stops_even_when_vllm_would_answer_no(stand_in: Path) -> None:
    write_vllm(stand_in, {GATES_PATH: GATES_SOURCE, "vllm/config/__init__.py": CONFIG_SOURCE})
    register()
    gates = importlib.import_module("vllm.utils.flashinfer")
    with pytest.raises(ChoiceUnavailable, match="--moe-backend flashinfer_cutlass"):
        gates.has_flashinfer_trtllm_fused_moe()


def test_a_moved_predicate_leaves_the_module_alone_with_one_warning(
    stand_in: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    write_vllm(stand_in, {GATES_PATH: "def has_flashinfer():\n    return True\n"})
    register()
    with caplog.at_level(logging.WARNING, logger="jitguard"):
        gates = importlib.import_module("vllm.utils.flashinfer")
    [warned] = warnings(caplog)
    assert "[jitguard-fault]" in warned and "has_flashinfer_moe" in warned
    assert gates.has_flashinfer() is False  # the site that is there is still guarded


def test_a_crashing_check_keeps_vllms_choices_with_one_warning(
    stand_in: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    write_vllm(stand_in, {GATES_PATH: GATES_SOURCE, SAMPLER_PATH: SAMPLER_SOURCE})

    def broken(choice: Choice) -> ChoiceStatus:
        raise RuntimeError("probe exploded")

    register(broken)
    gates = importlib.import_module("vllm.utils.flashinfer")
    sampler = importlib.import_module("vllm.v1.sample.ops.topk_topp_sampler")
    with caplog.at_level(logging.WARNING, logger="jitguard"):
        for _ in range(3):
            assert gates.has_flashinfer() is True
            assert sampler.TopKTopPSampler().forward() == "flashinfer"
    faults = [w for w in warnings(caplog) if "[jitguard-fault]" in w]
    assert len(faults) == 2 and all("probe exploded" in w for w in faults)  # one per choice, once each


def test_a_sampler_build_that_fails_on_first_use_switches_to_pytorch_once(
    stand_in: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    import torch

    write_vllm(stand_in, {SAMPLER_PATH: failing(SAMPLER_SOURCE)})
    register(lambda choice: assess(choice, []))  # pre-flight passes
    module = importlib.import_module("vllm.v1.sample.ops.topk_topp_sampler")
    sampler = module.TopKTopPSampler()
    logits = torch.tensor([[0.0, 5.0, 1.0], [9.0, 0.0, 1.0]])
    with caplog.at_level(logging.WARNING, logger="jitguard"):
        tokens = [sampler.forward(logits).tolist() for _ in range(3)]
        assert module.TopKTopPSampler().forward() == "pytorch"  # a later one decides at init
    # vLLM's own functions sampled (the stand-in's random_sample: argmax), FlashInfer was tried once only
    assert tokens == [[1, 0]] * 3 and len(module.CALLS) == 1
    [warned] = warnings(caplog)
    assert "failed on first use: [build-failed]" in warned and "PyTorch-native sampler" in warned


def test_the_v2_runners_sampler_is_guarded_even_when_imported_before_the_plugin(
    stand_in: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # vLLM 0.24's V2 model runner (dense Qwen3, Llama): its Sampler asks the predicate it imported by name
    # and calls flashinfer_sample itself; TopKTopPSampler is never built. Seen on the H200: the doomed
    # sampling build ran and took the engine down.
    write_vllm(stand_in, {SAMPLER_PATH: SAMPLER_SOURCE, V2_PATH: V2_SOURCE})
    v2 = importlib.import_module("vllm.v1.worker.gpu.sample.sampler")  # before register(): names copied
    register()
    with caplog.at_level(logging.WARNING, logger="jitguard"):
        assert [v2.Sampler().use_flashinfer for _ in range(3)] == [False] * 3
    [warned] = warnings(caplog)
    assert "FlashInfer top-k/top-p sampler" in warned and "[link-missing-libcuda]" in warned
    monkeypatch.setenv("VLLM_USE_FLASHINFER_SAMPLER", "1")
    with pytest.raises(ChoiceUnavailable, match="VLLM_USE_FLASHINFER_SAMPLER=1"):
        v2.Sampler()
    plugin.unregister()  # vLLM's own functions back, in the module that imported them too
    assert v2.Sampler().use_flashinfer is True


def test_a_v2_sampler_whose_first_use_fails_samples_with_vllms_functions(
    stand_in: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    import torch

    write_vllm(stand_in, {SAMPLER_PATH: failing(SAMPLER_SOURCE), V2_PATH: V2_SOURCE})
    register(lambda choice: assess(choice, []))  # pre-flight passes
    v2 = importlib.import_module("vllm.v1.worker.gpu.sample.sampler")
    sampler = v2.Sampler()
    assert sampler.use_flashinfer is True
    logits = torch.tensor([[0.0, 5.0, 1.0]])
    with caplog.at_level(logging.WARNING, logger="jitguard"):
        assert [sampler.sample(logits).tolist() for _ in range(3)] == [[1]] * 3
    assert len(sys.modules["vllm.v1.sample.ops.topk_topp_sampler"].CALLS) == 1
    assert torch.equal(logits, torch.tensor([[0.0, 5.0, 1.0]]))  # the caller's logits untouched
    [warned] = warnings(caplog)
    assert "failed on first use: [build-failed]" in warned


def test_a_release_without_the_predicate_is_guarded_in_init_without_a_warning(
    stand_in: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    write_vllm(stand_in, {SAMPLER_PATH: INLINE_SAMPLER_SOURCE})
    register()
    module = importlib.import_module("vllm.v1.sample.ops.topk_topp_sampler")
    assert not hasattr(module, "flashinfer_sampler_supported")
    with caplog.at_level(logging.WARNING, logger="jitguard"):
        assert module.TopKTopPSampler().forward() == "pytorch"
    [warned] = warnings(caplog)  # the verdict, and no "layout moved" for the predicate 0.17-0.22 lack
    assert "FlashInfer top-k/top-p sampler" in warned and "jitguard-fault" not in warned
