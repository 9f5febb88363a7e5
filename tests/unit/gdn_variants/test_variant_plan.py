"""Which FlashInfer GDN prefill instances a model needs, and the module that holds them (pure; no FlashInfer)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from jitguard.gdn_variants.variant_plan import (
    FULL_MODULE,
    GdnVariant,
    VariantError,
    falls_back_to_full,
    family_for,
    model_gdn_from_config,
    module_name,
    parse_variant,
    plan_for,
    variant_of_call,
    variants_for_model,
)

MODELS = Path(__file__).parents[2] / "data" / "models"
OLD = family_for("0.6.6")
NEW = family_for("0.6.12")
assert OLD is not None and NEW is not None


def _config(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((MODELS / name / "config.json").read_text())
    return data


def test_qwen3_next_on_flashinfer_066_needs_one_instance_of_32() -> None:
    model = model_gdn_from_config(_config("qwen3_next"))
    planned = variants_for_model(model, OLD)
    plan = plan_for("0.6.6", planned.variants)
    assert [v.suffix for v in plan.variants] == ["bf16_g1b1a1i1"]
    assert plan.module == "gdn_prefill_sm90_only_bf16_g1b1a1i1"
    assert plan.sources == (
        "gdn_prefill_kernel_bf16_g1b1a1i1.cu",
        "gdn_prefill_launcher.cu",
        "prefill_kernel_delta_rule_sm90.cu",
    )
    assert (plan.tu_count, plan.family.full_tu_count, plan.family.instance_count) == (3, 34, 32)
    assert planned.notes == ()
    assert model.linear_layers == 36  # 48 layers, every 4th one full attention


def test_qwen35_keeps_its_gdn_fields_and_dtype_under_text_config() -> None:
    model = model_gdn_from_config(_config("qwen3_5"))
    assert (model.num_qk_heads, model.num_v_heads, model.key_head_dim) == (16, 32, 128)
    assert model.config_dtype == "bfloat16" and model.is_gva
    assert model.linear_layers == 48
    assert [v.suffix for v in variants_for_model(model, OLD).variants] == ["bf16_g1b1a1i1"]


def test_from_flashinfer_068_the_instance_names_the_checkpoint_flag_and_vllm_runs_without() -> None:
    model = model_gdn_from_config(_config("qwen3_5"))
    plan = plan_for("0.6.12", variants_for_model(model, NEW).variants)
    assert plan.module == "gdn_prefill_sm90_only_bf16_g1b1a1i1c0"
    assert (plan.tu_count, plan.family.full_tu_count) == (3, 66)
    with_checkpoints = variants_for_model(model, NEW, checkpointing=True).variants
    assert [v.suffix for v in with_checkpoints] == ["bf16_g1b1a1i1c0", "bf16_g1b1a1i1c1"]
    with pytest.raises(VariantError, match="no state checkpoints"):
        variants_for_model(model, OLD, checkpointing=True)


def test_the_serving_dtype_wins_over_the_config_and_an_unknown_one_plans_both() -> None:
    config = _config("qwen3_next")
    model = model_gdn_from_config(config)
    assert [v.dtype for v in variants_for_model(model, OLD, dtype="float16").variants] == ["half"]
    assert [v.dtype for v in variants_for_model(model, OLD, dtype="torch.bfloat16").variants] == ["bf16"]
    fp32 = model_gdn_from_config({**config, "torch_dtype": "float32"})
    planned = variants_for_model(fp32, OLD)
    assert sorted(v.dtype for v in planned.variants) == ["bf16", "half"]
    assert "pass --dtype" in planned.notes[0]
    with pytest.raises(VariantError, match="float16 and bfloat16"):
        variants_for_model(model, OLD, dtype="float32")


def test_gqa_and_mha_heads_are_not_gva() -> None:
    config = _config("qwen3_next")
    for hq, hv in ((16, 16), (32, 16)):
        model = model_gdn_from_config({**config, "linear_num_key_heads": hq, "linear_num_value_heads": hv})
        (variant,) = variants_for_model(model, OLD).variants
        assert variant.suffix == "bf16_g0b1a1i1"


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"model_type": "llama", "num_attention_heads": 32}, "no linear_num_value_heads"),
        ({"linear_num_value_heads": 32}, "linear_num_key_heads must be a positive integer"),
        ({"linear_num_key_heads": 12, "linear_num_value_heads": 32}, "multiple of the other"),
        (
            {"linear_num_key_heads": 16, "linear_num_value_heads": 32, "layer_types": ["full_attention"]},
            "no linear_attention layer",
        ),
    ],
)
def test_a_config_that_does_not_say_is_a_usage_error_naming_the_field(
    config: dict[str, Any], message: str
) -> None:
    with pytest.raises(VariantError, match=message):
        model_gdn_from_config(config, source="x/config.json")


def test_the_grid_is_flashinfers_generator_order_and_names() -> None:
    grid = OLD.all_variants()
    assert len(grid) == 32 and len(NEW.all_variants()) == 64
    assert grid[0].source == "gdn_prefill_kernel_half_g0b0a0i0.cu"
    assert grid[-1].source == "gdn_prefill_kernel_bf16_g1b1a1i1.cu"
    assert NEW.all_variants()[1].suffix == "half_g0b0a0i0c1"
    assert plan_for("0.6.6").sources[-2:] == ("gdn_prefill_launcher.cu", "prefill_kernel_delta_rule_sm90.cu")


@pytest.mark.parametrize(
    ("version", "releases"),
    [
        ("0.6.2", None),
        ("0.6.3", "0.6.3 - 0.6.7"),
        ("0.6.7.post1", "0.6.3 - 0.6.7"),
        ("0.6.8", "0.6.8 - 0.6.13"),
    ],
)
def test_families_follow_the_releases(version: str, releases: str | None) -> None:
    family = family_for(version)
    assert (family.releases if family else None) == releases


def test_no_family_outside_the_nvcc_era() -> None:
    assert family_for("0.6.14") is None and family_for(None) is None and family_for("garbage") is None
    with pytest.raises(VariantError, match=r"0\.6\.3 - 0\.6\.13"):
        plan_for("0.6.18")


def test_variant_names_round_trip_and_a_wrong_spelling_says_the_right_one() -> None:
    for variant in OLD.all_variants():
        assert parse_variant(variant.suffix, OLD) == variant
    assert parse_variant("bfloat16_g1b1a1i1", OLD).suffix == "bf16_g1b1a1i1"
    for bad in ("bf16_g1b1a1i1c0", "fp8_g1b1a1i1", "bf16_g1b1a1", "bf16-g1b1a1i1"):
        with pytest.raises(VariantError, match=r"e\.g\. bf16_g1b1a1i1"):
            parse_variant(bad, OLD)
    with pytest.raises(VariantError, match="bf16_g1b1a1i1c0"):
        parse_variant("bf16_g1b1a1i1", NEW)
    with pytest.raises(VariantError, match="does not belong"):
        plan_for("0.6.12", [parse_variant("bf16_g1b1a1i1", OLD)])


def test_the_module_name_is_the_variant_set_and_never_flashinfers_own() -> None:
    a, b, c = (parse_variant(n, OLD) for n in ("bf16_g1b1a1i1", "bf16_g1b1a1i0", "half_g1b1a1i1"))
    assert module_name([a]) != FULL_MODULE and module_name([a]).startswith(FULL_MODULE + "_only_")
    assert (
        module_name([a, b]) == module_name([b, a, a]) == "gdn_prefill_sm90_only_bf16_g1b1a1i0_bf16_g1b1a1i1"
    )
    many = module_name([a, b, c])
    assert many.startswith("gdn_prefill_sm90_only_3_variants_") and many != module_name([a, b])
    assert module_name([c, b, a]) == many
    assert plan_for("0.6.6").module == FULL_MODULE and not plan_for("0.6.6").partial
    with pytest.raises(VariantError):
        module_name([])


def test_a_call_picks_the_instance_flashinfers_launcher_would() -> None:
    def call(dtype: str, hq: int, hv: int, **flags: bool) -> str | None:
        chosen = dict(has_alpha=True, has_beta=True, has_initial_state=True, checkpointing=False) | flags
        variant = variant_of_call(dtype, hq, hv, family=NEW, **chosen)
        return variant.suffix if variant else None

    assert call("torch.bfloat16", 16, 32) == "bf16_g1b1a1i1c0"
    assert call("torch.float16", 16, 16, has_initial_state=False) == "half_g0b1a1i0c0"
    assert call("bfloat16", 8, 4, has_alpha=False, checkpointing=True) == "bf16_g0b1a0i1c1"
    assert call("torch.float32", 16, 32) is None  # no instance: FlashInfer's full module raises its own error
    assert (
        variant_of_call(
            "bfloat16",
            16,
            32,
            has_alpha=True,
            has_beta=True,
            has_initial_state=True,
            checkpointing=True,
            family=OLD,
        )
        is None
    )


def test_describe_says_what_an_instance_does() -> None:
    assert GdnVariant("bf16", True, True, True, False).describe() == (
        "bfloat16, GVA (Hv > Hq), beta, alpha, no initial state"
    )


def test_only_an_unnamed_compile_failure_gives_way_to_the_full_module() -> None:
    assert falls_back_to_full(["build-failed"]) and falls_back_to_full([])
    for verdict in ("link-missing-libcuda", "build-oom-killed", "build-timeout", "so-glibcxx-missing"):
        assert not falls_back_to_full(["build-failed", verdict])
