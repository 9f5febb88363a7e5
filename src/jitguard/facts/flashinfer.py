"""FlashInfer's state on this machine, without importing it: era, cache layout, prebuilt modules, version
checks.

Importing flashinfer takes seconds, needs a GPU or FLASHINFER_CUDA_ARCH_LIST, creates its workspace directory
and raises on a jit-cache version mismatch, so ``probe`` reads package metadata and the file system only and
re-derives what FlashInfer would do (from the 0.6.x sources: ``flashinfer/jit/env.py``,
``compilation_context.py``, ``jit/core.py``). The real import, when its original exception is wanted, is
``facts/import_probe.py``'s.
"""

from __future__ import annotations

import importlib.metadata as metadata
import importlib.util
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.version import InvalidVersion, Version

from jitguard.facts.packages import PackageFacts

ERA_NONE = "none"  # flashinfer-python not installed
ERA_TOO_OLD = "too-old"  # installed, but before GDN prefill existed (< 0.6.2)
ERA_NVCC = "nvcc"  # 0.6.2 - 0.6.13: nvcc + ninja JIT into the workspace cache
ERA_CUTEDSL = "cutedsl"  # >= 0.6.14: CuTeDSL kernels compiled in-process, memory-only cache

FIRST_GDN = (0, 6, 2)
FIRST_CUTEDSL = (0, 6, 14)

# (first release, last release, module, translation units) of the nvcc era, read from the releases' jit/gdn.py
# (docs/gdn.md, "FlashInfer eras").
_NVCC_GDN = (
    ((0, 6, 2), (0, 6, 2), "gdn_prefill_launcher", 2),
    ((0, 6, 3), (0, 6, 7), "gdn_prefill_sm90", 34),
    ((0, 6, 8), (0, 6, 13), "gdn_prefill_sm90", 66),
)

# Compute capabilities GDN prefill runs on. nvcc era: the module is built for sm_90a only ('a' features do
# not run on any other capability). CuTeDSL era: dispatch on the major (9 -> SM90 kernel, 10 -> SM100,
# 12 -> SM120); anything else raises NotImplementedError("GDN prefill DSL kernel is unavailable").
GDN_CAPABILITIES = {
    ERA_NVCC: "9.0 (sm_90a)",
    ERA_CUTEDSL: "9.0 (sm_90a), 10.x (sm_100a/103a), 12.x (sm_120a/121a)",
}


# CuTeDSL era: per compute-capability major, (label, the module holding FlashInfer's GDN prefill kernel, the
# message FlashInfer raises at the first call when that module failed to import). FlashInfer imports these
# inside try/except (flashinfer/gdn_kernels/__init__.py, delta_rule_dsl/__init__.py, blackwell/__init__.py,
# read from the 0.6.14 and 0.7.4 wheels), so only importing the module itself shows the cause; for SM100
# that is blackwell.gdn_prefill (importing the blackwell package swallows the error too).
GDN_KERNEL_MODULES: dict[int, tuple[str, str, str]] = {
    9: (
        "SM90",
        "flashinfer.gdn_kernels.delta_rule_dsl.delta_rule_sm90",
        "SM90 GDN prefill DSL kernel is unavailable",
    ),
    10: (
        "SM100",
        "flashinfer.gdn_kernels.blackwell.gdn_prefill",
        "Blackwell GDN prefill kernel is unavailable",
    ),
    12: (
        "SM120",
        "flashinfer.gdn_kernels.delta_rule_dsl.delta_rule_sm120",
        "SM120 GDN prefill DSL kernel is unavailable",
    ),
}


@dataclass(frozen=True)
class GdnKernelModule:
    major: int
    label: str  # "SM90"
    module: str
    unavailable_message: str  # FlashInfer's NotImplementedError text once the import failed


@dataclass(frozen=True)
class FlashinferFacts:
    installed: bool
    version: str | None
    era: str  # ERA_*
    gdn_module: str | None  # nvcc era: the JIT module name
    gdn_tu_count: int | None  # nvcc era: translation units ninja compiles for it
    package_dir: str | None
    arch_list: tuple[
        str, ...
    ]  # e.g. ("9.0a",); empty when unknown (FlashInfer would ask torch's device query)
    arch_source: str | None  # "FLASHINFER_CUDA_ARCH_LIST", "argument" or None
    arch_list_error: str | None  # FLASHINFER_CUDA_ARCH_LIST that FlashInfer's parser rejects at import
    arch_dir: str | None  # the workspace's arch component, e.g. "90a"
    workspace_base: Path
    cache_root: Path  # <base>/.cache/flashinfer
    workspace_dir: Path  # <cache_root>/<version>/<arch_dir> (less what is unknown)
    jit_dir: Path | None  # <workspace_dir>/cached_ops, when the arch is known
    generated_dir: Path | None
    version_check_disabled: bool  # FLASHINFER_DISABLE_VERSION_CHECK set to anything non-empty
    jit_cache_version: str | None
    jit_cache_dir: Path | None
    jit_cache_matches: bool | None  # the public versions are equal
    jit_cache_import_raises: bool  # `import flashinfer` raises RuntimeError over the mismatch
    cubin_version: str | None
    cubin_import_raises: bool
    prebuilt_gdn: Path | None  # a GDN module .so that makes the first call compile nothing
    prebuilt_source: str | None  # "flashinfer-jit-cache", "flashinfer-aot" or "cached_ops"
    cutlass_dsl_version: str | None
    cutlass_dsl_requirement: str | None  # flashinfer's own floor, e.g. ">=4.3.4"
    cutlass_dsl_satisfied: bool | None
    cubin_dir: Path | None = None  # flashinfer-cubin's cubins/, when installed

    def gdn_supports(self, major: int, minor: int) -> bool:
        """Whether this FlashInfer's GDN prefill runs on compute capability major.minor."""
        if self.era == ERA_NVCC:
            return (major, minor) == (9, 0)
        if self.era == ERA_CUTEDSL:
            return (major, minor) == (9, 0) or major in (10, 12)
        return False

    @property
    def gdn_capabilities(self) -> str:
        return GDN_CAPABILITIES.get(self.era, "none")


def gdn_kernel_modules(fi: FlashinferFacts, majors: Iterable[int] = ()) -> tuple[GdnKernelModule, ...]:
    """The CuTeDSL-era kernel modules GDN prefill imports for ``majors`` (SM90 when none is known: the GPU
    jitguard is most often asked about), leaving out archs without a kernel and modules this FlashInfer does
    not ship (when its package directory is known)."""
    if fi.era != ERA_CUTEDSL:
        return ()
    known = set(majors)
    wanted = sorted(known & set(GDN_KERNEL_MODULES)) if known else [9]
    found = []
    for major in wanted:
        label, module, message = GDN_KERNEL_MODULES[major]
        if fi.package_dir is not None:
            relative = Path(*module.split(".")[1:]).with_suffix(".py")
            if not (Path(fi.package_dir) / relative).is_file():
                continue
        found.append(GdnKernelModule(major, label, module, message))
    return tuple(found)


def era_of(version: str | None) -> tuple[str, str | None, int | None]:
    """(era, nvcc-era GDN module, TU count) for a flashinfer-python version."""
    if version is None:
        return ERA_NONE, None, None
    release = _release(version)
    if release is None or release < FIRST_GDN:
        return ERA_TOO_OLD, None, None
    if release >= FIRST_CUTEDSL:
        return ERA_CUTEDSL, None, None
    for first, last, module, tus in _NVCC_GDN:
        if first <= release <= last:
            return ERA_NVCC, module, tus
    return ERA_NVCC, "gdn_prefill_sm90", None  # unreachable with the table above; keeps the type total


def arch_from_capability(major: int, minor: int) -> str:
    """FlashInfer's arch spelling for a device: 9.0 -> '9.0a' (majors >= 9 get the 'a' suffix, as FlashInfer's
    device query does)."""
    return f"{major}.{minor}a" if major >= 9 else f"{major}.{minor}"


def installed_version() -> str | None:
    """flashinfer-python's version from its package metadata (no import), or None when it is not installed."""
    try:
        return metadata.version("flashinfer-python")
    except metadata.PackageNotFoundError:
        return None


def workspace_dirs(env: Mapping[str, str], version: str, *, arch: str = "9.0a") -> tuple[Path, Path]:
    """(cached_ops, generated) of FlashInfer ``version`` as it would resolve them: the arch from
    FLASHINFER_CUDA_ARCH_LIST (else ``arch``), the base from FLASHINFER_WORKSPACE_BASE (else $HOME)."""
    _, arch_dir, _ = parse_arch_list(env.get("FLASHINFER_CUDA_ARCH_LIST") or arch)
    base = Path(env["FLASHINFER_WORKSPACE_BASE"]) if "FLASHINFER_WORKSPACE_BASE" in env else _home(env)
    workspace = base / ".cache" / "flashinfer" / version / (arch_dir or "90a")
    return workspace / "cached_ops", workspace / "generated"


def probe(packages: PackageFacts, env: Mapping[str, str], *, arch: str | None = None) -> FlashinferFacts:
    """``arch``: FlashInfer's spelling ("9.0a", space-separated for several), used when
    FLASHINFER_CUDA_ARCH_LIST is unset (FlashInfer itself would then query the GPUs through torch; the caller
    knows them from GpuFacts)."""
    fi = packages.get("flashinfer-python")
    version = fi.version if fi else None
    era, module, tus = era_of(version)
    package_dir = _package_dir("flashinfer")

    if "FLASHINFER_CUDA_ARCH_LIST" in env:
        arch_text: str | None = env["FLASHINFER_CUDA_ARCH_LIST"]
        arch_source: str | None = "FLASHINFER_CUDA_ARCH_LIST"
    else:
        arch_text, arch_source = arch, ("argument" if arch else None)
    archs, arch_dir, arch_error = parse_arch_list(arch_text)

    # FlashInfer: Path(os.getenv("FLASHINFER_WORKSPACE_BASE", Path.home())); set-but-empty means the cwd.
    base = Path(env["FLASHINFER_WORKSPACE_BASE"]) if "FLASHINFER_WORKSPACE_BASE" in env else _home(env)
    cache_root = base / ".cache" / "flashinfer"
    workspace = cache_root
    if version:
        workspace = workspace / version
        if arch_dir:
            workspace = workspace / arch_dir
    jit_dir = workspace / "cached_ops" if version and arch_dir else None
    generated = workspace / "generated" if version and arch_dir else None

    check_disabled = bool(env.get("FLASHINFER_DISABLE_VERSION_CHECK"))  # FlashInfer: `if not os.getenv(...)`
    jc_dir_pkg = _package_dir("flashinfer_jit_cache")
    jc_version = _module_version(jc_dir_pkg, packages.version("flashinfer-jit-cache"))
    jc_dir = Path(jc_dir_pkg) / "jit_cache" if jc_dir_pkg else None
    jc_matches = jc_raises = None
    if jc_version is not None and version is not None:
        jc_matches = jc_version.split("+", 1)[0] == version
        # FlashInfer compares with str.startswith (the jit-cache version carries a +cuXXX tag).
        jc_raises = not check_disabled and not jc_version.startswith(version)
    cubin_pkg = _package_dir("flashinfer_cubin")
    cubin_version = _module_version(cubin_pkg, packages.version("flashinfer-cubin"))
    cubin_raises = bool(cubin_version and version and not check_disabled and cubin_version != version)

    prebuilt, source = _find_prebuilt(module if era == ERA_NVCC else None, jc_dir, package_dir, jit_dir)
    dsl_version = packages.version("nvidia-cutlass-dsl")
    dsl_req = _requirement_of("flashinfer-python", "nvidia-cutlass-dsl") if fi else None
    dsl_ok = None
    if dsl_req is not None and dsl_version is not None:
        dsl_ok = _satisfies(dsl_req, dsl_version)

    return FlashinferFacts(
        installed=fi is not None,
        version=version,
        era=era,
        gdn_module=module,
        gdn_tu_count=tus,
        package_dir=package_dir,
        arch_list=archs,
        arch_source=arch_source if archs or arch_error else None,
        arch_list_error=arch_error,
        arch_dir=arch_dir,
        workspace_base=base,
        cache_root=cache_root,
        workspace_dir=workspace,
        jit_dir=jit_dir,
        generated_dir=generated,
        version_check_disabled=check_disabled,
        jit_cache_version=jc_version,
        jit_cache_dir=jc_dir,
        jit_cache_matches=jc_matches,
        jit_cache_import_raises=bool(jc_raises),
        cubin_version=cubin_version,
        cubin_import_raises=cubin_raises,
        prebuilt_gdn=prebuilt,
        prebuilt_source=source,
        cutlass_dsl_version=dsl_version,
        cutlass_dsl_requirement=str(dsl_req.specifier) if dsl_req is not None else None,
        cutlass_dsl_satisfied=dsl_ok,
        cubin_dir=Path(cubin_pkg) / "cubins" if cubin_pkg else None,
    )


def _release(version: str) -> tuple[int, int, int] | None:
    try:
        parts = Version(version).release
    except InvalidVersion:
        return None
    return (*parts, 0, 0, 0)[:3]  # type: ignore[return-value]


def _home(env: Mapping[str, str]) -> Path:
    if env.get("HOME"):
        return Path(env["HOME"])
    return Path.home()


def parse_arch_list(text: str | None) -> tuple[tuple[str, ...], str | None, str | None]:
    """(archs, workspace arch dir, error) the way FlashInfer's CompilationContext parses the list: split on
    single spaces, each 'major.minor' with an integer major; the dir joins sorted (major, minor) pairs."""
    if text is None:
        return (), None, None
    pairs = set()
    for item in text.split(" "):
        major, dot, minor = item.partition(".")
        if not dot or "." in minor or not major.isdigit():
            return (
                (),
                None,
                (
                    f"FLASHINFER_CUDA_ARCH_LIST={text!r}: {item!r} is not 'major.minor' (FlashInfer splits "
                    "on single spaces, e.g. '9.0a' or '9.0a 10.0a')"
                ),
            )
        pairs.add((int(major), minor))
    ordered = sorted(pairs)
    return tuple(f"{a}.{b}" for a, b in ordered), "_".join(f"{a}{b}" for a, b in ordered), None


def _package_dir(top_level: str) -> str | None:
    """Where a top-level package lives, without importing it (find_spec of a top-level name imports
    nothing)."""
    try:
        spec = importlib.util.find_spec(top_level)
    except (ImportError, ValueError):
        return None
    if spec is None:
        return None
    if spec.submodule_search_locations:
        return str(next(iter(spec.submodule_search_locations)))
    return str(Path(spec.origin).parent) if spec.origin else None


_VERSION_ASSIGN = re.compile(r"""^__version__\s*(?::\s*str\s*)?=\s*["']([^"']+)["']""", re.MULTILINE)


def _module_version(package_dir: str | None, dist_version: str | None) -> str | None:
    """The ``__version__`` FlashInfer compares: flashinfer-jit-cache and -cubin keep it in ``_build_meta.py``
    (read as text, never imported); the distribution version otherwise."""
    if package_dir is None:
        return dist_version
    for name in ("_build_meta.py", "__init__.py"):
        try:
            text = (Path(package_dir) / name).read_text()
        except OSError:
            continue
        m = _VERSION_ASSIGN.search(text)
        if m:
            return m.group(1)
    return dist_version


def _find_prebuilt(
    module: str | None, jit_cache: Path | None, package_dir: str | None, jit_dir: Path | None
) -> tuple[Path | None, str | None]:
    """The .so FlashInfer would load for the GDN module without compiling, in FlashInfer's own order:
    the AOT dir (flashinfer-jit-cache, else the wheel's data/aot), then the JIT cache (a previous build)."""
    if module is None:
        return None, None
    candidates = []
    if jit_cache is not None:
        candidates.append((jit_cache / module / f"{module}.so", "flashinfer-jit-cache"))
    elif package_dir is not None:
        candidates.append((Path(package_dir) / "data" / "aot" / module / f"{module}.so", "flashinfer-aot"))
    if jit_dir is not None:
        candidates.append((jit_dir / module / f"{module}.so", "cached_ops"))
    for path, source in candidates:
        try:
            if path.is_file():
                return path, source
        except OSError:
            continue
    return None, None


def _requirement_of(dist: str, dependency: str) -> Requirement | None:
    try:
        requires = metadata.requires(dist) or []
    except metadata.PackageNotFoundError:
        return None
    for line in requires:
        try:
            req = Requirement(line)
        except InvalidRequirement:
            continue
        if req.name.lower().replace("_", "-") != dependency:
            continue
        try:
            if req.marker is not None and not req.marker.evaluate({"extra": ""}):
                continue  # an optional extra's requirement is not a floor for everyone
        except Exception:  # an unevaluable marker: keep the requirement rather than lose the floor
            pass
        return req
    return None


def _satisfies(req: Requirement, version: str) -> bool | None:
    try:
        return req.specifier.contains(Version(version), prereleases=True)
    except InvalidVersion:
        return None
