"""The FlashInfer names jitguard patches, calls or reads, in one list, and whether a FlashInfer tree has them.

jitguard reaches into FlashInfer by module and name (``integrations.flashinfer_hook``, ``flashinfer_jit``,
``gdn_variants``, ``cutedsl``, ``gdn.backends.flashinfer``). When a release moves one, the patch or call stops
applying; ``check(root, version)`` finds each name in a FlashInfer tree's source without importing it
(``facts.source_names``), so a new release can be read before anyone installs it. ``NAMES`` is kept in step
with the code that uses each name by a unit test (each entry's ``by`` module must name it).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from packaging.specifiers import SpecifierSet
from packaging.version import InvalidVersion, Version

from jitguard.facts.source_names import FOUND, SiteState, find_name

Use = Literal["patched", "called", "read", "deferred to"]
CORE = "flashinfer.jit.core"
COMPILE_CACHE = "flashinfer.gdn_kernels.delta_rule_dsl.custom_compile_cache"


@dataclass(frozen=True)
class FlashInferName:
    module: str
    target: str  # a name, 'Class.method', or several joined by ', ' (as facts.source_names reads them)
    releases: str  # the flashinfer-python releases that have it, as a specifier ('>=0.6.3,<0.6.14')
    use: Use
    by: str  # the jitguard module that uses it
    why: str


NAMES: tuple[FlashInferName, ...] = (
    FlashInferName(
        CORE,
        "JitSpec.build_and_load, JitSpec.build",
        ">=0.6.2",
        "patched",
        "jitguard.integrations.flashinfer_hook",
        "every nvcc module build goes through the supervised, shared build",
    ),
    FlashInferName(
        CORE,
        "JitSpecNvcc",
        ">=0.6.18",
        "read",
        "jitguard.integrations.flashinfer_hook",
        "tells FlashInfer's nvcc modules from its CuTeDSL kernels (those stay FlashInfer's)",
    ),
    FlashInferName(
        "flashinfer.jit.cpp_ext",
        "run_ninja",
        ">=0.6.2",
        "patched",
        "jitguard.integrations.flashinfer_hook",
        "every ninja build is memory-bounded and watched",
    ),
    FlashInferName(
        "flashinfer.jit.env",
        "FLASHINFER_JIT_DIR, FLASHINFER_AOT_DIR",
        ">=0.6.2",
        "read",
        "jitguard.gdn_variants.module_router",
        "where a built or prebuilt GDN module lies",
    ),
    FlashInferName(
        "flashinfer.gdn_prefill",
        "chunk_gated_delta_rule",
        ">=0.6.2",
        "called",
        "jitguard.gdn.backends.flashinfer",
        "the GDN prefill op behind jitguard's FlashInfer backend",
    ),
    FlashInferName(
        "flashinfer.gdn_prefill",
        "get_gdn_prefill_module",
        ">=0.6.3,<0.6.14",
        "patched",
        "jitguard.gdn_variants.module_router",
        "a call builds only the GDN instances it needs, not all 34 or 66 files",
    ),
    FlashInferName(
        "flashinfer.jit.gdn",
        "gen_gdn_prefill_sm90_module",
        ">=0.6.3,<0.6.14",
        "called",
        "jitguard.gdn_variants.partial_module",
        "the full GDN module's spec, cut down to the model's variants",
    ),
    FlashInferName(
        COMPILE_CACHE,
        "cached_compile, _in_mem_compile_cache, _compile_options_key",
        ">=0.6.14",
        "patched",
        "jitguard.cutedsl.persisting_compile",
        "the CuTeDSL compile entry: GDN prefill kernels FlashInfer keeps in memory only, kept on disk by jitguard",
    ),
    FlashInferName(
        "flashinfer.gdn_kernels",
        "chunk_gated_delta_rule_sm90, chunk_gated_delta_rule_sm100, chunk_gated_delta_rule_sm120",
        ">=0.6.14",
        "read",
        "jitguard.gdn.backends.flashinfer",
        "which GDN prefill kernel imported (FlashInfer swallows the import error)",
    ),
    FlashInferName(
        "flashinfer.jit.cute_dsl_core",
        "JitSpecCuteDsl, build_and_load_cute_dsl_kernel",
        ">=0.6.18",
        "deferred to",
        "jitguard.cutedsl.compile_routes",
        "FlashInfer's own CuTeDSL disk cache: kernels it keeps are left to it",
    ),
)
ENTRY = NAMES[7]  # the CuTeDSL compile entry jitguard hooks


def expected(name: FlashInferName, version: str | None) -> bool | None:
    """Whether flashinfer-python ``version`` should have ``name``; None when the version cannot be read."""
    try:
        return SpecifierSet(name.releases).contains(Version(version or ""), prereleases=True)
    except InvalidVersion:
        return None


@dataclass(frozen=True)
class NameCheck:
    name: FlashInferName
    state: SiteState
    expected: bool | None

    @property
    def drifted(self) -> bool:
        """Expected in this release and not found: jitguard's use of it no longer applies."""
        return self.expected is True and self.state != FOUND

    def to_json(self) -> dict[str, Any]:
        n = self.name
        return {
            "module": n.module,
            "target": n.target,
            "releases": n.releases,
            "use": n.use,
            "by": n.by,
            "why": n.why,
            "state": self.state,
            "expected": self.expected,
            "drifted": self.drifted,
        }


def check(root: str, version: str | None, names: Sequence[FlashInferName] = NAMES) -> tuple[NameCheck, ...]:
    """Each of ``names`` looked up in the FlashInfer at ``root`` (the directory holding ``flashinfer/``)."""
    return tuple(NameCheck(n, find_name(n.module, n.target, [root]), expected(n, version)) for n in names)
