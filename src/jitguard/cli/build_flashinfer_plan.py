"""The GDN instance selection of `jitguard build flashinfer-gdn` (``--model``, ``--variant``, ``--dtype``,
``--checkpointing``) and its ``--plan``: what would be compiled and where, from the config and FlashInfer's
version alone (package metadata, no FlashInfer import, no compile: well under a second, on any host)."""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from jitguard.errors import EXIT_OK, UsageError

if TYPE_CHECKING:
    from jitguard.gdn_variants.variant_plan import ModelGdn, VariantPlan

# The command's stages are imported where it runs them: `jitguard --help` imports every command module.

COMMAND = "build.flashinfer-gdn"


@dataclass(frozen=True)
class Selection:
    """What the flags ask for: a model config and/or named instances; neither = FlashInfer's full module."""

    model: ModelGdn | None = None
    model_path: Path | None = None
    variant_names: tuple[str, ...] = ()
    dtype: str | None = None
    checkpointing: bool = False

    @property
    def partial(self) -> bool:
        return self.model is not None or bool(self.variant_names)

    def plan(self, version: str | None) -> tuple[VariantPlan, tuple[str, ...]]:
        """The plan for flashinfer-python ``version`` and the notes on how it was chosen."""
        from jitguard.gdn_variants.variant_plan import (
            VariantError,
            parse_variant,
            plan_for,
            variants_for_model,
        )

        if version is None:
            raise VariantError(
                "flashinfer-python is not installed here: pass --flashinfer-version (e.g. 0.6.6) to plan for it"
            )
        try:
            full = plan_for(version)
        except VariantError as exc:
            raise VariantError(f"{exc}. {_no_family_fix(version)}") from None
        if not self.partial:
            return full, ()
        chosen = [parse_variant(name, full.family) for name in self.variant_names]
        notes: tuple[str, ...] = ()
        if self.model is not None:
            planned = variants_for_model(
                self.model, full.family, dtype=self.dtype, checkpointing=self.checkpointing
            )
            chosen += planned.variants
            notes = planned.notes
        return plan_for(version, chosen), notes


def _no_family_fix(version: str) -> str:
    """What to do for a FlashInfer release without an nvcc GDN module: from 0.6.14 GDN prefill is CuTeDSL,
    compiled in the process (nothing to prebuild); before 0.6.3 there are no instances to choose."""
    from packaging.version import InvalidVersion, Version

    try:
        newer = Version(version) >= Version("0.6.14")
    except InvalidVersion:
        return "Fix: give a release number such as --flashinfer-version 0.6.6."
    if newer:
        return (
            "From 0.6.14 FlashInfer's GDN prefill is a CuTeDSL kernel compiled inside the serving process, so "
            "there is nothing to prebuild with nvcc: jitguard compiles it once per host and keeps it "
            "(docs/cutedsl.md). Fix: to plan an nvcc-era module, name one, e.g. "
            "`jitguard build flashinfer-gdn --plan --flashinfer-version 0.6.13`"
        )
    return "Fix: `pip install -U 'flashinfer-python>=0.6.3'`, or plan for one: --flashinfer-version 0.6.6"


def selection_from(args: argparse.Namespace) -> Selection:
    if (args.dtype or args.checkpointing) and not args.model:
        raise UsageError("--dtype and --checkpointing choose instances for a model: give --model PATH too")
    if not args.model:
        return Selection(variant_names=tuple(args.variant))
    from jitguard.gdn_variants.variant_plan import model_gdn_from_config

    path = _config_path(args.model)
    return Selection(
        model=model_gdn_from_config(_read_config(path), source=str(path)),
        model_path=path,
        variant_names=tuple(args.variant),
        dtype=args.dtype,
        checkpointing=args.checkpointing,
    )


def installed_version() -> str | None:
    from jitguard.facts.flashinfer import installed_version as version

    return version()


def _config_path(text: str) -> Path:
    path = Path(text).expanduser()
    if path.is_dir():
        path = path / "config.json"
    if path.exists() and not path.is_file():
        raise UsageError(
            f"--model {text}: not a regular file (a FIFO, a device?); give the model's config.json"
        )
    if not path.is_file():
        raise UsageError(
            f"--model {text}: no such file; give the model's config.json or the directory that holds it"
        )
    return path.resolve()


def _read_config(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise UsageError(f"--model {path}: not a readable JSON config ({exc})") from None
    if not isinstance(data, dict):
        raise UsageError(f"--model {path}: not a JSON object")
    return data


# ---- --plan ------------------------------------------------------------------------------------------------
def module_dir(env: dict[str, str], version: str, module: str) -> Path:
    """Where FlashInfer (and the serving process) keeps ``module``:
    ``<FLASHINFER_WORKSPACE_BASE or $HOME>/.cache/flashinfer/<version>/90a/cached_ops/<module>``."""
    from jitguard.facts.flashinfer import workspace_dirs

    jit_dir = workspace_dirs(env, version)[0]
    return jit_dir / module


def report_plan(args: argparse.Namespace, env: dict[str, str], started: float) -> int:
    selection = selection_from(args)
    version = args.flashinfer_version or installed_version()
    plan, notes = selection.plan(version)
    assert version is not None
    directory = module_dir(env, version, plan.module)
    so_path = directory / f"{plan.module}.so"
    built = so_path.is_file()
    if args.json:
        from jitguard.cli.envelope import dumps

        payload = {
            "ok": True,
            "status": "plan",
            "elapsed_s": round(time.monotonic() - started, 3),
            "plan": plan.to_json(),
            "model": _model_json(selection),
            "notes": list(notes),
            "so_path": str(so_path),
            "built": built,
        }
        print(dumps(COMMAND, payload))
        return EXIT_OK
    print(render_plan(plan, selection, notes, so_path, built))
    return EXIT_OK


def render_plan(
    plan: VariantPlan, selection: Selection, notes: tuple[str, ...], so_path: Path, built: bool
) -> str:
    family = plan.family
    lines = [f"Plan for flashinfer-python {plan.version} (GDN prefill, nvcc era, sm_90a):"]
    if selection.model is not None:
        lines.append(f"  model:     {selection.model_path}: {selection.model.describe()}")
    kind = "only these instances" if plan.partial else "FlashInfer's full module: every instance"
    lines.append(f"  module:    {plan.module} ({kind})")
    chosen = plan.variants or family.all_variants()
    lines.append(f"  instances: {len(chosen)} of {family.instance_count}")
    if plan.partial:
        width = max(len(v.suffix) for v in chosen)
        lines += [f"    {v.suffix.ljust(width)}  {v.describe()}" for v in chosen]
    lines.append(f"  compiles:  {plan.tu_count} of FlashInfer's {family.full_tu_count} files")
    if plan.partial:
        for source in plan.sources:
            why = ""
            if source.endswith("launcher.cu"):
                why = "  (FlashInfer's, unchanged)"
            elif source.startswith("prefill_kernel"):
                why = "  (jitguard's copy of FlashInfer's dispatch: calls only the instances above)"
            lines.append(f"    {source}{why}")
    state = "built" if built else "not built yet"
    lines.append(f"  library:   {so_path} ({state})")
    lines += [f"  note:      {n}" for n in notes]
    lines.append(f"Build it: jitguard build flashinfer-gdn {_flags(selection)}".rstrip())
    return "\n".join(lines)


def _flags(selection: Selection) -> str:
    parts = []
    if selection.model_path is not None:
        parts.append(f"--model {selection.model_path}")
    if selection.dtype:
        parts.append(f"--dtype {selection.dtype}")
    if selection.checkpointing:
        parts.append("--checkpointing")
    parts += [f"--variant {name}" for name in selection.variant_names]
    return " ".join(parts)


def _model_json(selection: Selection) -> dict[str, Any] | None:
    model = selection.model
    if model is None:
        return None
    return {
        "path": str(selection.model_path),
        "model_type": model.model_type,
        "dtype": model.config_dtype,
        "num_qk_heads": model.num_qk_heads,
        "num_v_heads": model.num_v_heads,
        "head_dim_qk": model.key_head_dim,  # (a field named *key* would be redacted in the envelope)
        "head_dim_v": model.value_head_dim,
        "linear_layers": model.linear_layers,
    }
