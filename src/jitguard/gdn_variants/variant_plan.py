"""Which instances of FlashInfer's nvcc-era GDN prefill kernel to build: the instance grid of each release,
the ones a served model or one call needs, and the module that holds a set of them.

FlashInfer 0.6.3 - 0.6.13 compiles one instance per dtype and combination of its template flags (32, then 64),
and its launcher picks one per call from q's dtype and which inputs are given (docs/gdn_variants.md). A
model's Hugging Face config.json gives the head layout and dtype of its linear-attention layers, and so the
instances vLLM's regular prefill path calls. Pure: a config, a call's facts or variant names in, a plan out;
``partial_module`` makes the module.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from jitguard.errors import UsageError

FULL_MODULE = "gdn_prefill_sm90"
PARTIAL_PREFIX = f"{FULL_MODULE}_only_"
LAUNCHER_SOURCE = "gdn_prefill_launcher.cu"
DISPATCH_SOURCE = "prefill_kernel_delta_rule_sm90.cu"
INSTANCE_SYMBOL = "launch_delta_rule_prefill_kernel_gbai"
# FlashInfer's file-name spelling of a dtype -> torch's name.
DTYPES = {"half": "float16", "bf16": "bfloat16"}
_DTYPE_ALIASES = {
    "half": "half",
    "float16": "half",
    "fp16": "half",
    "f16": "half",
    "bf16": "bf16",
    "bfloat16": "bf16",
}
# Codes of a failed partial build that say nothing the full module would not also hit: the generic compile
# failure (it may be jitguard's generated dispatch unit) -> FlashInfer's own full module is tried instead.
# Every other cause (no libcuda, out of memory, timeout, GLIBCXX, a lock wait given up) is a verdict about
# the machine that the full module, larger, would meet as well.
FALLBACK_CODES = frozenset({"build-failed"})


class VariantError(UsageError):
    """A model config, variant spelling or version that does not say which GDN instances to build."""


@dataclass(frozen=True)
class Family:
    """One range of FlashInfer releases with the same GDN instance grid."""

    first: tuple[int, int, int]
    last: tuple[int, int, int]
    flags: tuple[str, ...]  # the template's bool parameters, in order
    letters: str  # FlashInfer's file-name letter of each flag, e.g. "gbai"
    launcher_args: int  # positional arguments of the module's gdn_prefill

    @property
    def releases(self) -> str:
        return f"{'.'.join(map(str, self.first))} - {'.'.join(map(str, self.last))}"

    @property
    def instance_count(self) -> int:
        return len(DTYPES) * 2 ** len(self.flags)

    @property
    def full_tu_count(self) -> int:
        return self.instance_count + 2

    @property
    def has_checkpointing(self) -> bool:
        return "enable_checkpointing" in self.flags

    def all_variants(self) -> tuple[GdnVariant, ...]:
        """Every instance FlashInfer's full module compiles, in its generator's order."""
        import itertools

        out = []
        for dtype in DTYPES:
            for values in itertools.product((False, True), repeat=len(self.flags)):
                out.append(GdnVariant.of(dtype, values, self))
        return tuple(out)


_FLAGS_4 = ("is_gva", "needs_beta", "needs_alpha", "init_state")
FAMILIES = (
    Family((0, 6, 3), (0, 6, 7), _FLAGS_4, "gbai", 11),
    Family((0, 6, 8), (0, 6, 13), (*_FLAGS_4, "enable_checkpointing"), "gbaic", 14),
)


def family_for(version: str | None) -> Family | None:
    """The instance grid of a flashinfer-python version; None outside 0.6.3 - 0.6.13 (no such module)."""
    if not version:
        return None
    from packaging.version import InvalidVersion, Version

    try:
        release = (*Version(version).release, 0, 0, 0)[:3]
    except InvalidVersion:
        return None
    for family in FAMILIES:
        if family.first <= release <= family.last:
            return family
    return None


@dataclass(frozen=True, order=True)
class GdnVariant:
    """One instance: the dtype (FlashInfer's spelling, 'half' or 'bf16') and the flag values in template
    order (``checkpointing`` is None where the family has no such flag)."""

    dtype: str
    is_gva: bool
    needs_beta: bool
    needs_alpha: bool
    init_state: bool
    checkpointing: bool | None = None

    @classmethod
    def of(cls, dtype: str, values: Iterable[bool], family: Family) -> GdnVariant:
        flags = tuple(bool(v) for v in values)
        if len(flags) != len(family.flags):
            raise VariantError(
                f"{len(flags)} flag values given; FlashInfer {family.releases} has {family.flags}"
            )
        g, b, a, i = flags[:4]
        return cls(dtype, g, b, a, i, checkpointing=flags[4] if family.has_checkpointing else None)

    @property
    def values(self) -> tuple[bool, ...]:
        base = (self.is_gva, self.needs_beta, self.needs_alpha, self.init_state)
        return base if self.checkpointing is None else (*base, self.checkpointing)

    @property
    def suffix(self) -> str:
        """FlashInfer's name for the instance, e.g. 'bf16_g1b1a1i1' (0.6.3 - 0.6.7) or 'bf16_g1b1a1i1c0'."""
        letters = "gbaic"[: len(self.values)]
        return (
            self.dtype
            + "_"
            + "".join(f"{letter}{int(v)}" for letter, v in zip(letters, self.values, strict=True))
        )

    @property
    def source(self) -> str:
        """The instance's file in FlashInfer's generated sources."""
        return f"gdn_prefill_kernel_{self.suffix}.cu"

    def describe(self) -> str:
        """For people: 'bfloat16, GVA, beta, alpha, initial state'."""
        parts = [DTYPES[self.dtype], "GVA (Hv > Hq)" if self.is_gva else "GQA/MHA (Hq >= Hv)"]
        parts += [
            name if on else f"no {name}"
            for name, on in (
                ("beta", self.needs_beta),
                ("alpha", self.needs_alpha),
                ("initial state", self.init_state),
            )
        ]
        if self.checkpointing is not None:
            parts.append("state checkpoints" if self.checkpointing else "no checkpoints")
        return ", ".join(parts)

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "name": self.suffix,
            "dtype": DTYPES[self.dtype],
            "is_gva": self.is_gva,
            "needs_beta": self.needs_beta,
            "needs_alpha": self.needs_alpha,
            "init_state": self.init_state,
        }
        if self.checkpointing is not None:
            data["checkpointing"] = self.checkpointing
        return data


def parse_variant(text: str, family: Family) -> GdnVariant:
    """'bf16_g1b1a1i1' (or with 'c0'/'c1' from 0.6.8) as FlashInfer names its instance files."""
    dtype, sep, flags = text.strip().partition("_")
    letters = family.letters
    expected = f"{{half,bf16}}_{''.join(f'{c}<0|1>' for c in letters)}, e.g. bf16_" + "".join(
        f"{c}1" if c != "c" else "c0" for c in letters
    )
    if not sep or _DTYPE_ALIASES.get(dtype.lower()) is None or len(flags) != 2 * len(letters):
        raise VariantError(f"--variant {text!r}: expected {expected} (FlashInfer {family.releases})")
    values = []
    for i, letter in enumerate(letters):
        pair = flags[2 * i : 2 * i + 2]
        if pair[0] != letter or pair[1] not in "01":
            raise VariantError(f"--variant {text!r}: expected {expected} (FlashInfer {family.releases})")
        values.append(pair[1] == "1")
    return GdnVariant.of(_DTYPE_ALIASES[dtype.lower()], values, family)


def flashinfer_dtype(name: str) -> str | None:
    """'bfloat16', 'torch.bfloat16', 'bf16' -> 'bf16'; 'float16'/'half' -> 'half'; anything else None."""
    return _DTYPE_ALIASES.get(str(name).strip().lower().removeprefix("torch."))


# ---- the module ------------------------------------------------------------------------------------------
def module_name(variants: Iterable[GdnVariant]) -> str:
    """The partial module's name: never FlashInfer's own ``gdn_prefill_sm90``, always saying what it holds
    ('gdn_prefill_sm90_only_bf16_g1b1a1i1'; three or more: a count and a digest of the set)."""
    unique = sorted(set(variants))
    if not unique:
        raise VariantError("no GDN prefill variant selected")
    names = [v.suffix for v in unique]
    if len(names) <= 2:
        return PARTIAL_PREFIX + "_".join(names)
    digest = hashlib.sha256("|".join(names).encode()).hexdigest()[:10]
    return f"{PARTIAL_PREFIX}{len(names)}_variants_{digest}"


@dataclass(frozen=True)
class VariantPlan:
    """What a GDN prefill module for a variant set compiles. ``variants`` empty = FlashInfer's full module."""

    version: str
    family: Family
    variants: tuple[GdnVariant, ...] = ()

    @property
    def partial(self) -> bool:
        return bool(self.variants)

    @property
    def module(self) -> str:
        return module_name(self.variants) if self.variants else FULL_MODULE

    @property
    def instance_sources(self) -> tuple[str, ...]:
        chosen = self.variants or self.family.all_variants()
        return tuple(v.source for v in chosen)

    @property
    def sources(self) -> tuple[str, ...]:
        """The translation units, in FlashInfer's order: instances, the launcher, the dispatch unit (for a
        partial module, jitguard's copy that references only these instances)."""
        return (*self.instance_sources, LAUNCHER_SOURCE, DISPATCH_SOURCE)

    @property
    def tu_count(self) -> int:
        return len(self.sources)

    def covers(self, variant: GdnVariant) -> bool:
        return not self.variants or variant in self.variants

    def to_json(self) -> dict[str, Any]:
        return {
            "flashinfer": self.version,
            "module": self.module,
            "partial": self.partial,
            "full_module": FULL_MODULE,
            "variants": [v.to_json() for v in (self.variants or ())],
            "sources": list(self.sources),
            "tu_count": self.tu_count,
            "full_tu_count": self.family.full_tu_count,
        }


def plan_for(version: str, variants: Iterable[GdnVariant] = ()) -> VariantPlan:
    """The plan for ``variants`` (none = the full module) of flashinfer-python ``version``."""
    family = family_for(version)
    if family is None:
        raise VariantError(
            f"flashinfer-python {version} has no nvcc-era GDN prefill module with per-variant instances "
            "(0.6.3 - 0.6.13 have one)"
        )
    chosen = tuple(sorted(set(variants)))
    for v in chosen:
        if (v.checkpointing is not None) != family.has_checkpointing:
            raise VariantError(f"variant {v.suffix} does not belong to FlashInfer {family.releases}")
    return VariantPlan(version, family, chosen)


def falls_back_to_full(codes: Iterable[str]) -> bool:
    """Whether a failed partial build should give way to FlashInfer's full module (see FALLBACK_CODES)."""
    found = set(codes)
    return found <= FALLBACK_CODES


# ---- what a model or a call needs ------------------------------------------------------------------------
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
