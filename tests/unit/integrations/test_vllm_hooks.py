"""Corner cases of finding and patching vLLM's GDN backend choice, on a stand-in ``vllm`` package written
to a temp dir (the real releases are tested in tests/real/vllm; these are the shapes they do not have)."""

from __future__ import annotations

import importlib
import logging
import sys
from pathlib import Path

import pytest

from jitguard.decision.engine_verdicts import ChoiceUnavailable
from jitguard.decision.gdn_resolution import BackendStatus
from jitguard.integrations import vllm as plugin
from stand_in_vllm import write_vllm

CURRENT_SOURCE = """
def _resolve_gdn_prefill_backend(vllm_config):
    return vllm_config
"""
SPRING_SOURCE = """
class ChunkGatedDeltaRule:
    def __init__(self):
        self._forward_method = self.forward_cuda

    def forward_cuda(self):
        return "flashinfer"

    def forward_native(self):
        return "triton"

def get_current_vllm_config():
    class Config:
        additional_config = {"gdn_prefill_backend": REQUESTED}
    return Config()

REQUESTED = "auto"
"""
DOOMED = BackendStatus("flashinfer", False, ())


CURRENT_PATH = "vllm/model_executor/layers/mamba/gdn/qwen_gdn_linear_attn.py"
SPRING_PATH = "vllm/model_executor/layers/mamba/gdn_linear_attn.py"


def test_a_module_imported_after_register_is_patched_on_import(stand_in: Path) -> None:
    write_vllm(stand_in, {CURRENT_PATH: CURRENT_SOURCE})
    assert plugin.register(status=lambda: DOOMED)
    module = importlib.import_module(plugin.RESOLVER_SITE.module)
    assert module._resolve_gdn_prefill_backend(("auto", "flashinfer")) == ("auto", "triton")
    assert module._resolve_gdn_prefill_backend(("triton", "triton")) == ("triton", "triton")


def test_a_module_imported_before_register_is_patched_at_once(stand_in: Path) -> None:
    write_vllm(stand_in, {CURRENT_PATH: CURRENT_SOURCE})
    module = importlib.import_module(plugin.RESOLVER_SITE.module)
    plugin.register(status=lambda: DOOMED)
    assert module._resolve_gdn_prefill_backend(("auto", "flashinfer")) == ("auto", "triton")


def test_register_twice_wraps_once_and_unregister_restores(stand_in: Path) -> None:
    write_vllm(stand_in, {CURRENT_PATH: CURRENT_SOURCE})
    module = importlib.import_module(plugin.RESOLVER_SITE.module)
    original = module._resolve_gdn_prefill_backend
    plugin.register(status=lambda: DOOMED)
    plugin.register(status=lambda: DOOMED)
    assert module._resolve_gdn_prefill_backend.__jitguard_original__ is original
    assert sum(isinstance(f, type(plugin._hook)) for f in sys.meta_path) == 1
    plugin.unregister()
    assert module._resolve_gdn_prefill_backend is original
    assert not plugin.is_registered()


def test_a_moved_function_is_tolerated_with_one_warning(
    stand_in: Path, caplog: pytest.LogCaptureFixture
) -> None:
    write_vllm(stand_in, {CURRENT_PATH: "def something_else():\n    return 1\n"})
    plugin.register(status=lambda: DOOMED)
    with caplog.at_level(logging.DEBUG, logger="jitguard"):
        module = importlib.import_module(plugin.RESOLVER_SITE.module)
    assert module.something_else() == 1
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1
    assert "[jitguard-fault]" in warnings[0] and "has no _resolve_gdn_prefill_backend" in warnings[0]


def test_an_unexpected_return_shape_is_passed_through(stand_in: Path) -> None:
    write_vllm(stand_in, {CURRENT_PATH: CURRENT_SOURCE})
    plugin.register(status=lambda: DOOMED)
    module = importlib.import_module(plugin.RESOLVER_SITE.module)
    assert module._resolve_gdn_prefill_backend("flashinfer") == "flashinfer"


def test_spring_layout_switches_the_forward_method(stand_in: Path) -> None:
    write_vllm(stand_in, {SPRING_PATH: SPRING_SOURCE})
    plugin.register(status=lambda: DOOMED)
    module = importlib.import_module(plugin.LAYER_INIT_SITE.module)
    assert module.ChunkGatedDeltaRule()._forward_method() == "triton"
    module.REQUESTED = "flashinfer"
    with pytest.raises(ChoiceUnavailable):
        module.ChunkGatedDeltaRule()


def test_spring_layout_without_a_triton_path_is_left_alone(stand_in: Path) -> None:
    write_vllm(stand_in, {SPRING_PATH: SPRING_SOURCE.replace("def forward_native", "def forward_other")})
    plugin.register(status=lambda: DOOMED)
    module = importlib.import_module(plugin.LAYER_INIT_SITE.module)
    assert module.ChunkGatedDeltaRule()._forward_method() == "flashinfer"


def test_a_malformed_setting_turns_the_plugin_off_with_one_clear_line(
    stand_in: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    write_vllm(stand_in, {})
    monkeypatch.setenv("JITGUARD_DISABLE", "maybe")
    with caplog.at_level(logging.DEBUG, logger="jitguard"):
        assert plugin.register() is False
    assert not plugin.is_registered()
    [record] = caplog.records
    assert "JITGUARD_DISABLE='maybe' is not valid" in record.getMessage()
    assert not record.exc_info  # a sentence, not a traceback


def test_disable_makes_register_a_no_op(stand_in: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_vllm(stand_in, {})
    monkeypatch.setenv("JITGUARD_DISABLE", "1")
    assert plugin.register() is False
    assert not plugin.is_registered()


EXPECTING_SOURCE = """
def _resolve_gdn_prefill_backend(vllm_config):
    return ("auto", "flashinfer")
"""


def test_a_flashinfer_choice_tells_the_gdn_router_the_models_instances_before_the_first_call(
    stand_in: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """vLLM's config is known when it resolves the backend, long before the first prefill: jitguard plans the
    instances from it (dtype, head layout; vLLM always passes beta, alpha and an initial state)."""
    import json
    from types import SimpleNamespace

    from jitguard.gdn_variants import module_router
    from jitguard.gdn_variants.variant_plan import family_for

    family = family_for(plugin_flashinfer_version())
    if family is None:
        pytest.skip("needs an nvcc-era flashinfer-python (0.6.3 - 0.6.13) installed")
    monkeypatch.setattr(module_router, "_expected", set())
    config = json.loads((Path(__file__).parents[2] / "data/models/qwen3_5/config.json").read_text())
    text = SimpleNamespace(to_dict=lambda: config["text_config"])
    vllm_config = SimpleNamespace(model_config=SimpleNamespace(hf_text_config=text, dtype="torch.bfloat16"))
    write_vllm(stand_in, {CURRENT_PATH: EXPECTING_SOURCE})
    assert plugin.register(status=lambda: BackendStatus("flashinfer", True, ()))
    module = importlib.import_module(plugin.RESOLVER_SITE.module)
    with caplog.at_level(logging.INFO, logger="jitguard"):
        assert module._resolve_gdn_prefill_backend(vllm_config) == ("auto", "flashinfer")
        module._resolve_gdn_prefill_backend(vllm_config)  # every layer asks: planned (and logged) once
    suffix = "bf16_g1b1a1i1" + ("c0" if family.has_checkpointing else "")
    assert [v.suffix for v in module_router.expected()] == [suffix]
    planned = [r.getMessage() for r in caplog.records if "needs the instance" in r.getMessage()]
    assert len(planned) == 1 and suffix in planned[0]


def plugin_flashinfer_version() -> str | None:
    import importlib.metadata

    try:
        return importlib.metadata.version("flashinfer-python")
    except importlib.metadata.PackageNotFoundError:
        return None
