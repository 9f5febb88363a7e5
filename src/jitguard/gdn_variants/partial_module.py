"""Build FlashInfer's GDN prefill module from only the instances a plan names (nvcc era, 0.6.3 - 0.6.13).

FlashInfer's dispatch unit calls every instance, so fewer instance objects leave undefined symbols that kill
the process at the first call of a missing one. A partial module is FlashInfer's own instance files and
launcher plus a copy of the dispatch unit whose ``LAUNCH`` calls only planned instances and throws otherwise;
built through ``build_spec`` and refused before loading if a planned symbol is missing (``verify_library``).
``dispatch_source`` checks the source is the one it knows, else ``VariantSourceError`` (docs/gdn_variants.md).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from jitguard.facts.elf import symbols
from jitguard.fileio import read_json, write_json
from jitguard.gdn_variants.variant_plan import (
    DISPATCH_SOURCE,
    FULL_MODULE,
    INSTANCE_SYMBOL,
    PARTIAL_PREFIX,
    GdnVariant,
    VariantPlan,
    parse_variant,
    plan_for,
)

if TYPE_CHECKING:
    from jitguard.flashinfer_jit.flashinfer_build import BuiltModule
    from jitguard.supervise.build_options import BuildOptions

MANIFEST = "jitguard_variants.json"  # beside the partial module's build.ninja: what it holds
MANIFEST_SCHEMA = "jitguard.gdn-variants/1"
ROUTED = "jitguard_routed_gbai"
_DTYPE_CODES = {"half": 0, "bf16": 1}
_LAUNCH = re.compile(r"^\s*#\s*define\s+LAUNCH\s*\(([^)]*)\)")
_NAMESPACE = re.compile(r"^\s*namespace\s+flat\s*\{")
_CALL = re.compile(rf"\b{INSTANCE_SYMBOL}\s*<")


class VariantSourceError(ValueError):
    """FlashInfer's GDN sources are not the ones jitguard knows how to build a partial module from."""


class IncompleteModule(ValueError):
    """A partial module still references an instance it does not contain; it is never loaded."""


def dispatch_source(original: str, plan: VariantPlan) -> str:
    """FlashInfer's dispatch unit with ``LAUNCH`` routed through a wrapper that knows the plan's instances."""
    if not plan.partial:
        return original
    lines = original.splitlines(keepends=True)
    starts = [i for i, line in enumerate(lines) if _LAUNCH.match(line)]
    if len(starts) != 1:
        raise VariantSourceError(
            f"{DISPATCH_SOURCE}: expected one '#define LAUNCH(...)', found {len(starts)}"
        )
    start = starts[0]
    match = _LAUNCH.match(lines[start])
    assert match is not None
    params = [p.strip() for p in match.group(1).split(",") if p.strip()]
    flags = len(plan.family.flags)
    if len(params) != flags:
        raise VariantSourceError(
            f"{DISPATCH_SOURCE}: LAUNCH takes {len(params)} flags ({', '.join(params)}); FlashInfer "
            f"{plan.family.releases} has {flags} ({', '.join(plan.family.flags)})"
        )
    end = start
    while lines[end].rstrip("\r\n").endswith("\\") and end + 1 < len(lines):
        end += 1
    macro = "".join(lines[start : end + 1])
    outside = "".join(lines[:start] + lines[end + 1 :])
    if len(_CALL.findall(macro)) != 1 or _CALL.search(outside):
        raise VariantSourceError(
            f"{DISPATCH_SOURCE}: expected {INSTANCE_SYMBOL} to be called exactly once, inside LAUNCH"
        )
    namespaces = [i for i in range(start) if _NAMESPACE.match(lines[i])]
    if not namespaces:
        raise VariantSourceError(f"{DISPATCH_SOURCE}: no 'namespace flat {{' before LAUNCH")
    includes = next((i for i, line in enumerate(lines) if line.lstrip().startswith("#include")), None)
    if includes is None or includes > namespaces[0]:
        raise VariantSourceError(f"{DISPATCH_SOURCE}: no #include before 'namespace flat {{'")
    routed_macro = _CALL.sub(f"{ROUTED}<", macro)
    ns = namespaces[0]
    return "".join(
        [
            *lines[:includes],
            _PRELUDE.format(module=plan.module),
            *lines[includes : ns + 1],
            _wrapper(plan),
            *lines[ns + 1 : start],
            routed_macro,
            *lines[end + 1 :],
        ]
    )


_PRELUDE = """\
// jitguard: the dispatch unit of {module}, a partial build of FlashInfer's GDN prefill module.
// This is FlashInfer's prefill_kernel_delta_rule_sm90.cu with one change: LAUNCH calls jitguard_routed_gbai,
// which calls an instance of launch_delta_rule_prefill_kernel_gbai only when this module holds it and throws
// otherwise, so the library references no instance it does not contain.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <stdexcept>
#include <string>

"""


def _wrapper(plan: VariantPlan) -> str:
    n = len(plan.family.flags)
    flags = [f"F{i}" for i in range(n)]
    terms = []
    for v in plan.variants:
        conds = [f"D == {_DTYPE_CODES[v.dtype]}"] + [
            f if on else f"!{f}" for f, on in zip(flags, v.values, strict=True)
        ]
        terms.append("(" + " && ".join(conds) + ")")
    letters = plan.family.letters
    described = " + ".join(
        f'"{c}" + std::string({f} ? "1" : "0")' for c, f in zip(letters, flags, strict=True)
    )
    held = ", ".join(v.suffix for v in plan.variants)
    bools = ", ".join(f"bool {f}" for f in flags)
    return f"""
// ---- jitguard: the instances {plan.module} holds: {held}
template <typename T>
struct jitguard_dtype_code {{
  static constexpr int value = -1;
}};
template <>
struct jitguard_dtype_code<half> {{
  static constexpr int value = 0;
}};
template <>
struct jitguard_dtype_code<nv_bfloat16> {{
  static constexpr int value = 1;
}};

template <int D, {bools}>
constexpr bool jitguard_instance_built() {{
  return {" || ".join(terms) or "false"};
}}

template <{bools}, typename ArchTag, typename TO, typename... Rest>
void {ROUTED}(cudaStream_t stream, TO* output, Rest... rest) {{
  constexpr int code = jitguard_dtype_code<TO>::value;
  if constexpr (jitguard_instance_built<code, {", ".join(flags)}>()) {{
    {INSTANCE_SYMBOL}<{", ".join(flags)}, ArchTag>(stream, output, rest...);
  }} else {{
    (void)stream;
    (void)output;
    ((void)rest, ...);
    throw std::runtime_error(
        std::string("jitguard: {plan.module} holds only the GDN prefill instance(s) {held}; this call "
                    "needs ") +
        (code == 0 ? "half" : code == 1 ? "bf16" : "another dtype") + "_" + {described} +
        ". jitguard routes such calls to a module that holds them, so this is a jitguard bug: please "
        "report it. JITGUARD_GDN_VARIANTS=all uses FlashInfer's full module.");
  }}
}}
// ---- end of jitguard's wrapper
"""


# ---- the module on disk ----------------------------------------------------------------------------------
def prepare_spec(plan: VariantPlan) -> Any:
    """FlashInfer's ``JitSpec`` for the plan: FlashInfer's own generator writes its sources (as at a stock
    first call); a partial plan then gets its own generated directory with copies of the instance files and
    the launcher and the routed dispatch unit, and a spec with FlashInfer's flags under the plan's name."""
    from flashinfer.jit import env as jit_env
    from flashinfer.jit.gdn import gen_gdn_prefill_sm90_module

    full = gen_gdn_prefill_sm90_module()
    if not plan.partial:
        return full
    if str(full.name) != FULL_MODULE:
        raise VariantSourceError(f"FlashInfer's GDN module is {full.name!r}, not {FULL_MODULE!r}")
    generated = {Path(s).name: Path(s) for s in full.sources}
    expected = plan_for(plan.version).sources
    if sorted(generated) != sorted(expected):
        missing = sorted(set(expected) - set(generated))[:4]
        extra = sorted(set(generated) - set(expected))[:4]
        raise VariantSourceError(
            f"FlashInfer {plan.version} generates {len(generated)} GDN sources, jitguard expects "
            f"{len(expected)} (missing {missing}, unexpected {extra})"
        )
    directory = Path(jit_env.FLASHINFER_GEN_SRC_DIR) / plan.module
    sources = []
    for name in plan.sources:
        text = generated[name].read_text()
        if name == DISPATCH_SOURCE:
            text = dispatch_source(text, plan)
        dest = directory / name
        _write_if_different(dest, text)
        sources.append(dest)
    spec = dataclasses.replace(full, name=plan.module, sources=sources)
    write_manifest(Path(spec.build_dir), plan)
    return spec


def _write_if_different(path: Path, text: str) -> None:
    """FlashInfer's ``write_if_different`` (an unchanged file keeps its mtime, so ninja has nothing to do), but
    atomic: ranks write these before taking the module's lock, and a compile that reads the file while another
    rank rewrites it sees the old file or the new one, never a truncated one."""
    try:
        if path.read_text() == text:
            return
    except (OSError, ValueError):
        path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(text)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def write_manifest(build_dir: Path, plan: VariantPlan) -> None:
    """What the module holds, beside its build.ninja, for other processes (``find_built``) and for people."""
    path = build_dir / MANIFEST
    data = {"schema": MANIFEST_SCHEMA, **plan.to_json()}
    if read_json(path) != data:
        write_json(path, data)


def find_built(jit_dir: Path, version: str, variant: GdnVariant) -> VariantPlan | None:
    """A partial module already built in FlashInfer's cache that holds ``variant`` (fewest variants first),
    e.g. one a prebuild (``jitguard build flashinfer-gdn --variant ...``) made for several."""
    found = []
    try:
        manifests = sorted(jit_dir.glob(f"{PARTIAL_PREFIX}*/{MANIFEST}"))
    except OSError:
        return None
    for path in manifests:
        plan = _read_manifest(path, version)
        if plan is None or variant not in plan.variants:
            continue
        if (path.parent / f"{plan.module}.so").is_file():
            found.append(plan)
    found.sort(key=lambda p: (len(p.variants), p.module))
    return found[0] if found else None


def _read_manifest(path: Path, version: str) -> VariantPlan | None:
    data = read_json(path)
    if not data or data.get("schema") != MANIFEST_SCHEMA or data.get("flashinfer") != version:
        return None
    try:
        family = plan_for(version).family
        variants = [parse_variant(str(v["name"]), family) for v in data.get("variants", [])]
        plan = plan_for(version, variants)
    except (KeyError, TypeError, ValueError):
        return None
    # A directory whose name does not match what it holds is someone else's: ignore it.
    return plan if plan.partial and plan.module == path.parent.name else None


def verify_library(so_path: Path, plan: VariantPlan) -> None:
    """Refuse a partial library that needs any instance from elsewhere: loaded, it would abort the process at
    the first call of that instance. Raises ``IncompleteModule`` (a jitguard fault: take the full module)."""
    if not plan.partial:
        return

    _, undefined = symbols(so_path, containing=INSTANCE_SYMBOL)
    if undefined:
        raise IncompleteModule(
            f"{so_path} references {len(undefined)} GDN prefill instance(s) it does not contain "
            f"(e.g. {undefined[0]}); it is not loaded"
        )


def build_variant_module(
    plan: VariantPlan,
    *,
    load: bool,
    options: BuildOptions | None = None,
    env: Mapping[str, str] | None = None,
    spec: Any = None,
) -> BuiltModule:
    """Prepare (unless ``spec``, a ``prepare_spec`` result, is given), build (supervised, under the module's
    own lock and failure-cache entry), verify and optionally load the plan's module. Raises ``BuildFailed``
    and its kin like ``build_spec``, and ``VariantSourceError``/``IncompleteModule`` when the partial module
    cannot be made safely."""
    # lazy: the build stage loads when a partial module is built, not with the router
    from jitguard.flashinfer_jit.flashinfer_build import build_spec

    spec = spec if spec is not None else prepare_spec(plan)
    return build_spec(
        spec,
        load=spec.load if load else None,
        options=options,
        env=env,
        verify=lambda so_path: verify_library(so_path, plan),
    )


def load_built(plan: VariantPlan) -> Any:
    """Load the plan's module without building it (``FLASHINFER_DISABLE_JIT``: a prebuilt partial module
    may still serve); None when it is not built. Checked like a fresh build before the load."""
    spec = prepare_spec(plan)
    so_path = Path(spec.jit_library_path)
    if not so_path.is_file():
        return None
    verify_library(so_path, plan)
    return spec.load(so_path)
