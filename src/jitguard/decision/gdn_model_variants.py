"""Which instances of FlashInfer's GDN prefill kernel a served model or one call needs (``decision.gdn_variants``
holds the instances themselves and the module that holds them).

From a Hugging Face config.json: the head layout and dtype of the model's linear-attention layers, and the
instances vLLM's regular prefill path calls with them; from a call: its type-level facts (dtype, heads, which
of beta, alpha, initial state and checkpoints it passes). Pure: a mapping or a call's facts in, variants out.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from jitguard.decision.gdn_variants import DTYPES, Family, GdnVariant, VariantError, flashinfer_dtype

_FLOAT32 = {"float32", "float", "fp32", "f32"}  # a config dtype the engine serves as float16 or bfloat16


@dataclass(frozen=True)
class ModelGdn:
    """What a Hugging Face config.json says about the model's GDN (linear attention) layers."""

    model_type: str | None
    config_dtype: str | None  # as written (torch_dtype / dtype), e.g. "bfloat16"
    num_qk_heads: int
    num_v_heads: int
    key_head_dim: int | None
    value_head_dim: int | None
    linear_layers: int | None  # layers of type linear_attention, when layer_types says

    @property
    def is_gva(self) -> bool:
        return self.num_v_heads > self.num_qk_heads

    def describe(self) -> str:
        layout = "GVA" if self.is_gva else ("MHA" if self.num_v_heads == self.num_qk_heads else "GQA")
        dims = f", D={self.key_head_dim}" if self.key_head_dim else ""
        layers = f", {self.linear_layers} GDN layers" if self.linear_layers is not None else ""
        return (
            f"{self.model_type or 'model'}: {layout}, {self.num_qk_heads} q/k heads, {self.num_v_heads} v "
            f"heads{dims}{layers}, dtype {self.config_dtype or 'not given'}"
        )


def model_gdn_from_config(config: Mapping[str, Any], *, source: str = "config.json") -> ModelGdn:
    """The GDN part of a model config (Qwen3-Next at the top level, Qwen3.5 under ``text_config``)."""
    if not isinstance(config, Mapping):
        raise VariantError(f"{source}: not a JSON object")
    scopes = [config]
    for key in ("text_config", "llm_config", "language_config"):
        nested = config.get(key)
        if isinstance(nested, Mapping):
            scopes.insert(0, nested)
    text = next((s for s in scopes if "linear_num_value_heads" in s), None)
    if text is None:
        raise VariantError(
            f"{source} has no linear_num_value_heads (at the top level or in text_config): not a model with "
            "Gated DeltaNet layers (Qwen3-Next, Qwen3.5), so it needs no GDN prefill module"
        )
    hq = _positive_int(text, "linear_num_key_heads", source)
    hv = _positive_int(text, "linear_num_value_heads", source)
    if hv % hq and hq % hv:
        raise VariantError(
            f"{source}: linear_num_key_heads={hq} and linear_num_value_heads={hv}: FlashInfer's GDN prefill "
            "needs one to be a multiple of the other"
        )
    dtype = next((str(s[k]) for s in scopes for k in ("dtype", "torch_dtype") if s.get(k)), None)
    layer_types = text.get("layer_types")
    linear = None
    if isinstance(layer_types, list):
        linear = sum(1 for t in layer_types if t == "linear_attention")
    else:  # Qwen3-Next: every full_attention_interval-th layer is full attention, the others GDN
        layers = _optional_int(text, "num_hidden_layers")
        interval = _optional_int(text, "full_attention_interval")
        if layers and interval and interval > 0:
            linear = layers - layers // interval
    if linear == 0:
        raise VariantError(f"{source}: layer_types has no linear_attention layer; nothing runs GDN prefill")
    return ModelGdn(
        model_type=str(text.get("model_type") or config.get("model_type") or "") or None,
        config_dtype=dtype,
        num_qk_heads=hq,
        num_v_heads=hv,
        key_head_dim=_optional_int(text, "linear_key_head_dim"),
        value_head_dim=_optional_int(text, "linear_value_head_dim"),
        linear_layers=linear,
    )


@dataclass(frozen=True)
class ModelVariants:
    """The instances a model served by vLLM needs, and why."""

    variants: tuple[GdnVariant, ...]
    notes: tuple[str, ...]


def variants_for_model(
    model: ModelGdn, family: Family, *, dtype: str | None = None, checkpointing: bool = False
) -> ModelVariants:
    """vLLM's use of FlashInfer's GDN prefill for this model: beta, alpha and an initial state always given;
    the serving dtype from ``dtype`` (vLLM's --dtype) or the config; without state checkpoints unless
    ``checkpointing`` (FlashInfer >= 0.6.8; a checkpointing call later builds its instance on demand)."""
    notes = []
    if dtype is not None:
        chosen = flashinfer_dtype(dtype)
        if chosen is None:
            raise VariantError(
                f"--dtype {dtype!r}: FlashInfer's GDN prefill has float16 and bfloat16 kernels only"
            )
        dtypes = [chosen]
    else:
        chosen = flashinfer_dtype(model.config_dtype or "")
        if chosen is not None:
            dtypes = [chosen]
        else:
            dtypes = list(DTYPES)
            shown = model.config_dtype or "not given"
            if (model.config_dtype or "").lower().removeprefix(
                "torch."
            ) in _FLOAT32 or not model.config_dtype:
                notes.append(
                    f"the config's dtype is {shown}: the engine serves it as float16 or bfloat16 (its --dtype "
                    "decides), so both are planned; pass --dtype to build one"
                )
            else:
                notes.append(
                    f"the config's dtype {shown!r} is not one jitguard knows: both dtypes are planned"
                )
    if model.key_head_dim is not None and model.key_head_dim != 128:
        notes.append(
            f"linear_key_head_dim={model.key_head_dim}: FlashInfer's GDN prefill kernel is made for D=128; "
            "the engine may not choose it"
        )
    if checkpointing and not family.has_checkpointing:
        raise VariantError(f"FlashInfer {family.releases} has no state checkpoints in GDN prefill")
    checkpoint_values = [False, True] if checkpointing else [False]
    out = []
    for d in dtypes:
        for c in checkpoint_values:
            values = [model.is_gva, True, True, True] + ([c] if family.has_checkpointing else [])
            out.append(GdnVariant.of(d, values, family))
    return ModelVariants(tuple(sorted(set(out))), tuple(notes))


def variant_of_call(
    dtype: str,
    num_q_heads: int,
    num_v_heads: int,
    *,
    has_alpha: bool,
    has_beta: bool,
    has_initial_state: bool,
    checkpointing: bool,
    family: Family,
) -> GdnVariant | None:
    """The instance FlashInfer's launcher would pick for a call; None for a dtype it has no instance of
    (its launcher raises for those: the full module, FlashInfer's own, then says so)."""
    d = flashinfer_dtype(dtype)
    if d is None:
        return None
    if checkpointing and not family.has_checkpointing:
        return None
    values = [num_v_heads > num_q_heads, has_beta, has_alpha, has_initial_state]
    if family.has_checkpointing:
        values.append(checkpointing)
    return GdnVariant.of(d, values, family)


def _positive_int(scope: Mapping[str, Any], key: str, source: str) -> int:
    value = scope.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise VariantError(f"{source}: {key} must be a positive integer, got {value!r}")
    return value


def _optional_int(scope: Mapping[str, Any], key: str) -> int | None:
    value = scope.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) else None
