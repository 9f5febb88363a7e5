"""Pre-flight of FlashInfer's CuTeDSL era beyond versions: the nvidia-cutlass-dsl wheels' files as their RECORD
lists them (``cutlass-dsl-install-damaged``), the DSL as the engine will import it and each GPU arch's GDN
kernel module (``importable``: a skipped .pth, a shadowing copy, a missing module), and the cause of a GDN
prefill kernel module that fails to import, which FlashInfer swallows (``flashinfer-dsl-kernel-import-broken``,
from ``doctor --deep``).

Which differences are damage: a file that is missing, or whose content matches no installed wheel's RECORD, or
that holds the copy of a sibling that should have lost. Two siblings that list the same path are installed in
dependency order by pip, the CUDA-specific wheel last, so its copy is the one that belongs there
(NVIDIA/cutlass #3259; vLLM's and SGLang's repairs reinstall -libs-cu13 last): -libs-base holding -libs-cu13's
copy is the normal result, the reverse is the race.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

from jitguard.facts import FactUnavailable
from jitguard.facts.flashinfer import GDN_KERNEL_MODULES
from jitguard.findings.catalog import make
from jitguard.findings.model import Finding

if TYPE_CHECKING:
    from jitguard.cutedsl.dsl_install import DistCheck, DslInstallFacts
    from jitguard.cutedsl.dsl_path import DslCopy, DslPathFacts, KernelSource
    from jitguard.facts import Facts
    from jitguard.facts.flashinfer import GdnKernelModule
    from jitguard.facts.import_probe import ImportProbe

# Install order of the DSL's wheels (pip's: dependencies first): a later one's copy of a shared path wins.
# Any other sibling (e.g. -libs-qnx-*) sits between -libs-base and the CUDA-specific wheels.
INSTALL_ORDER = {
    "nvidia-cutlass-dsl-libs-core": 0,
    "nvidia-cutlass-dsl-libs-base": 1,
    "nvidia-cutlass-dsl-libs-cu12": 3,
    "nvidia-cutlass-dsl-libs-cu13": 4,
    "nvidia-cutlass-dsl": 5,
}
_OTHER_SIBLING = 2
SHOWN_PATHS = 4  # per damaged distribution, in the evidence
# Top-level modules the DSL provides (cuda: cuda-bindings, one of its dependencies).
_DSL_MODULES = frozenset({"cutlass", "cuda", "nvidia_cutlass_dsl", "_mlir"})
_NO_MODULE = re.compile(r"No module named '([\w.]+)'")
_CANNOT_IMPORT = re.compile(r"cannot import name '[\w.]+' from '([\w.]+)'")
_FRAME = re.compile(r'File "([^"]+)"')


def install_rank(name: str) -> int:
    return INSTALL_ORDER.get(name, _OTHER_SIBLING)


@dataclass(frozen=True)
class Damage:
    path: str
    kind: str  # "missing", "unreadable", "foreign" (matches no installed wheel) or "sibling" (another's copy)
    holder: str | None = None  # kind "sibling": the wheel whose copy it holds

    def describe(self) -> str:
        if self.kind == "foreign":
            return "matches no installed wheel's RECORD (corrupt, truncated or another version)"
        if self.kind == "sibling":
            return f"holds {self.holder}'s copy"
        return self.kind


_HOW = {
    "sibling": "a sibling wheel's copy of a shared file won where this wheel's should have",
    "foreign": "some files match no installed wheel (corrupted, truncated or left from another version)",
    "missing": "some files are missing (deleted, or taken along when a sibling listing them was uninstalled)",
    "unreadable": "some files cannot be read",
}


def damage(check: DistCheck) -> list[Damage]:
    """Each file of ``check`` that is damage, not the expected overlap. Only the files Python imports or loads
    count: scripts outside the site directory (a conda prefix rewrite changes their bytes) and the dist-info
    metadata never reach a kernel, and blocking FlashInfer over them would be a false alarm."""
    found = [Damage(path, "missing") for path in check.missing if _loaded(path)]
    found += [Damage(path, "unreadable") for path in check.unreadable if _loaded(path)]
    for file in check.differ:
        if not _loaded(file.path):
            continue
        if file.matches is None:
            found.append(Damage(file.path, "foreign"))
        elif install_rank(file.matches) < install_rank(check.name):
            found.append(Damage(file.path, "sibling", file.matches))
    return found


def _loaded(path: str) -> bool:
    return not path.startswith("../") and ".dist-info/" not in path


def install(facts: Facts) -> list[Finding]:
    """``cutlass-dsl-install-damaged`` from the RECORD check (``facts.dsl_install``: None outside the CuTeDSL
    era, then nothing to say)."""
    dsl: DslInstallFacts | None = facts.dsl_install
    if dsl is None:
        return []
    damaged = [(d, bad) for d, bad in ((d, damage(d)) for d in dsl.dists) if bad]
    if not damaged:
        return []
    evidence = []
    for d, bad in damaged:
        evidence.append(
            f"{d.name} {d.version} at {d.location}: {len(bad)} of {d.files_checked} files not as its RECORD "
            f"lists ({len(d.missing)} missing, {len(d.differ)} differ)"
        )
        evidence += [f"  {b.path}: {b.describe()}" for b in bad[:SHOWN_PATHS]]
        if len(bad) > SHOWN_PATHS:
            evidence.append(f"  ... and {len(bad) - SHOWN_PATHS} more")
    evidence.append(
        "checked: "
        + ", ".join(f"{d.name} {d.version} ({d.files_checked} files)" for d in dsl.dists)
        + f" in {dsl.seconds:.1f} s"
    )
    kinds = {b.kind for _, bad in damaged for b in bad}
    return [
        make(
            "cutlass-dsl-install-damaged",
            backend="flashinfer",
            evidence=evidence,
            summary="; ".join(f"{_files(len(bad))} of {d.name} {d.version}" for d, bad in damaged),
            dists=", ".join(f"{d.name} {d.version}" for d, _ in damaged),
            how="; ".join(text for kind, text in _HOW.items() if kind in kinds),
            reinstall_command=reinstall_command(dsl, [d.name for d, _ in damaged]),
        )
    ]


def _files(n: int) -> str:
    return f"{n} file" if n == 1 else f"{n} files"


def reinstall_command(dsl: DslInstallFacts, names: list[str]) -> str:
    """pip, one wheel at a time, in install order: ``names`` and the siblings at the same version that share
    a path with one of them (reinstalling one of a pair alone would let the wrong copy win)."""
    chosen = {n: dsl.get(n) for n in names}
    for name in names:
        d = chosen[name]
        for other in d.shares_paths_with if d else ():
            sibling = dsl.get(other)
            if sibling is not None and d is not None and sibling.version == d.version:
                chosen[other] = sibling
    ordered = sorted(
        (c for c in chosen.values() if c is not None), key=lambda c: (install_rank(c.name), c.name)
    )
    return " && ".join(
        f"pip install --force-reinstall --no-deps {_quoted(f'{c.name}=={c.version}')}" for c in ordered
    )


def kernel_import(probe: ImportProbe, kernel: GdnKernelModule, facts: Facts) -> list[Finding]:
    """``flashinfer-dsl-kernel-import-broken`` from a ``probe_import`` of ``kernel.module``, with the cause
    classified (the DSL, a damaged DSL install, torch, or FlashInfer itself) and its fix first."""
    if probe.ok:
        return []
    missing = _NO_MODULE.search(probe.error_message or "")
    if probe.error_type == "ModuleNotFoundError" and missing and missing.group(1) == kernel.module:
        return []  # this FlashInfer keeps the kernel elsewhere: nothing to learn here
    fi = facts.flashinfer
    evidence = [f"import {probe.module}: {probe.error_type}: {probe.error_message}"]
    if probe.traceback_tail:
        evidence += probe.traceback_tail.splitlines()[-6:]
    params: dict[str, Any] = {
        "arch": kernel.label,
        "module": kernel.module,
        "unavailable": kernel.unavailable_message,
        "error_type": probe.error_type,
        "error_message": probe.error_message,
        "version": fi.version or "(unknown)",
        **_kernel_cause(probe, facts),
    }
    return [make("flashinfer-dsl-kernel-import-broken", backend="flashinfer", evidence=evidence, **params)]


def dsl_cause(probe: ImportProbe, facts: Facts) -> dict[str, str] | None:
    """``context``, ``repair`` and ``repair_command`` when ``probe`` failed inside the CUTLASS DSL (or for want
    of one of its modules), else None: the damaged wheels' reinstall when the RECORD check found damage,
    else the DSL at the floor FlashInfer declares."""
    if probe.ok or not _from_dsl(probe):
        return None
    fi = facts.flashinfer
    off_path = _off_path_copy(facts)
    if off_path is not None:
        return {
            "context": (
                f"The error comes from the CUTLASS DSL: nvidia-cutlass-dsl {off_path.version} is installed, but "
                f"its packages ({off_path.packages_dir}) are not on sys.path (cutlass-dsl-off-path)."
            ),
            "repair": "Put the DSL's packages on the path of every process of the engine:",
            "repair_command": _path_command(off_path.packages_dir),
        }
    dsl = _installed_dsl(facts)
    damaged = [d.name for d in dsl.dists if damage(d)] if dsl is not None else []
    if dsl is not None and damaged:
        return {
            "context": (
                "The error comes from the CUTLASS DSL, and jitguard found its install damaged "
                "(cutlass-dsl-install-damaged): the mixed files are the likely cause."
            ),
            "repair": "Reinstall the damaged DSL wheels, one at a time with pip:",
            "repair_command": reinstall_command(dsl, damaged),
        }
    requirement = fi.cutlass_dsl_requirement or ""
    extra = "[cu13]" if dsl is not None and dsl.get("nvidia-cutlass-dsl-libs-cu13") else ""
    floor = _floor(requirement)
    pinned = f"=={floor}" if floor else requirement
    return {
        "context": (
            f"The error comes from the CUTLASS DSL (nvidia-cutlass-dsl {fi.cutlass_dsl_version or 'not installed'}"
            f"), not FlashInfer: a DSL module is missing, or the DSL is not one flashinfer-python {fi.version} "
            f"works with (it declares nvidia-cutlass-dsl{requirement or ' without a version'})."
        ),
        "repair": (
            f"Reinstall the DSL at the floor flashinfer-python {fi.version} declares, with pip (not a parallel "
            "installer):"
        ),
        "repair_command": "pip install --force-reinstall " + _quoted(f"nvidia-cutlass-dsl{extra}{pinned}"),
    }


def _off_path_copy(facts: Facts) -> DslCopy | None:
    """The installed DSL copy whose packages ``import cutlass`` cannot find (a skipped .pth), else None."""
    try:
        where: DslPathFacts | None = facts.dsl_path
        if where is None or where.imported_from is not None:
            return None
        listed = where.metadata_copy
    except FactUnavailable:
        return None
    return listed if listed is not None and listed.present else None


def _path_command(packages_dir: str) -> str:
    return f"export PYTHONPATH={shlex.quote(packages_dir)}" + "${PYTHONPATH:+:$PYTHONPATH}"


def _kernel_cause(probe: ImportProbe, facts: Facts) -> dict[str, str]:
    if "not compiled with CUDA" in (probe.error_message or ""):
        return {
            "context": (
                "This torch is a CPU-only build and FlashInfer queries the GPU while importing (see "
                "torch-no-cuda); reinstalling FlashInfer or the DSL will not help."
            ),
            "repair": "Install a CUDA build of PyTorch (match your driver):",
            "repair_command": "pip install torch --index-url https://download.pytorch.org/whl/cu130",
        }
    return dsl_cause(probe, facts) or {
        "context": "The error is in FlashInfer's own code or one of its other dependencies, not the DSL.",
        "repair": "Reinstall FlashInfer at its version:",
        "repair_command": f"pip install --force-reinstall flashinfer-python=={facts.flashinfer.version}",
    }


def _quoted(requirement: str) -> str:
    """A requirement for the shell, in single quotes as every fix writes them (``[cu13]`` and ``>=`` need it)."""
    return f"'{requirement}'" if "'" not in requirement else shlex.quote(requirement)


def _from_dsl(probe: ImportProbe) -> bool:
    """Whether the import failed inside the DSL (or for want of one of its modules), not in FlashInfer."""
    message = probe.error_message or ""
    for pattern in (_NO_MODULE, _CANNOT_IMPORT):
        found = pattern.search(message)
        if found and found.group(1).split(".")[0] in _DSL_MODULES:
            return True
    frames = _FRAME.findall(probe.traceback_tail or "")
    last = frames[-1] if frames else ""
    return "/nvidia_cutlass_dsl/" in last or "/cutlass/" in last or "/cuda/bindings/" in last


def _installed_dsl(facts: Facts) -> DslInstallFacts | None:
    try:
        dsl: DslInstallFacts | None = facts.dsl_install
        if dsl is not None:
            dsl.dists  # noqa: B018  # an Unavailable raises here
        return dsl
    except FactUnavailable:
        return None


def _floor(requirement: str) -> str | None:
    """The release a ``>=X`` requirement starts at (``>=4.6.2a0`` -> ``4.6.2``), when it is one that meets it."""
    try:
        spec = SpecifierSet(requirement)
    except InvalidSpecifier:
        return None
    lower = [s.version for s in spec if s.operator in (">=", "~=", "==")]
    if len(lower) != 1:
        return None
    try:
        release = Version(lower[0]).base_version
    except InvalidVersion:
        return None
    return release if spec.contains(release, prereleases=True) else None


# ---- the DSL as the engine will import it (dsl_path.py) ---------------------------------------------------
def importable(facts: Facts) -> list[Finding]:
    """Whether ``import cutlass`` in the engine finds the installed DSL, and each GPU arch's GDN prefill kernel
    module is there with the DSL modules it imports: ``cutlass-dsl-off-path`` (a skipped .pth),
    ``cutlass-dsl-shadowed``, ``flashinfer-gdn-kernel-missing``, ``cutlass-dsl-lacks-kernel-imports``. Nothing
    outside the CuTeDSL era, and nothing when no DSL is installed (``cutlass-dsl-missing`` says that)."""
    where: DslPathFacts | None = facts.dsl_path
    if where is None:
        return []
    fi = facts.flashinfer
    listed = where.metadata_copy
    kernels = where.kernels
    common: dict[str, Any] = {
        "version": fi.version or "(unknown)",
        "requirement": fi.cutlass_dsl_requirement or "",
        "unavailable": _unavailable(kernels),
        "dsl_version": listed.version if listed else (fi.cutlass_dsl_version or "(not installed)"),
        "install_command": _install_command(facts, listed.version if listed else None),
    }
    found: list[Finding] = []
    if where.imported_from is None:
        if listed is None or not listed.present:
            return []  # not installed (cutlass-dsl-missing), or its files gone (cutlass-dsl-install-damaged)
        found.append(_off_path(where, listed, common))
    elif not where.is_dsl or where.owner is None or where.owner != listed:
        found.append(_shadowed(where, listed, common))
    for kernel in kernels:
        label = {"arch": kernel.label, "module": kernel.module}
        if kernel.path is None:
            found.append(
                make(
                    "flashinfer-gdn-kernel-missing",
                    backend="flashinfer",
                    evidence=[f"{fi.package_dir}: no {kernel.module}", f"flashinfer-python {fi.version}"],
                    package_dir=fi.package_dir,
                    **{**common, **label, "unavailable": _unavailable((kernel,))},
                )
            )
        elif kernel.missing_imports and where.is_dsl:
            found.append(
                make(
                    "cutlass-dsl-lacks-kernel-imports",
                    backend="flashinfer",
                    evidence=[
                        f"{kernel.path}: imports {', '.join(kernel.missing_imports)}",
                        f"{where.imported_from}: no such modules (nvidia-cutlass-dsl {common['dsl_version']})",
                    ],
                    missing=", ".join(kernel.missing_imports),
                    packages_dir=where.imported_from,
                    **{**common, **label, "unavailable": _unavailable((kernel,))},
                )
            )
    return found


def _off_path(where: DslPathFacts, listed: DslCopy, common: dict[str, Any]) -> Finding:
    pth = where.pth_files
    if not where.site_enabled:
        why = "this interpreter runs without the site module (`python -S`), so no .pth file is read"
    elif not pth:
        why = "none of its wheels lists a .pth file"
    elif not any(p.exists for p in pth):
        why = f"{', '.join(p.path for p in pth)} is missing"
    elif not any(p.read for p in pth if p.exists):
        why = (
            f"{next(p.path for p in pth if p.exists)} is not read: its directory is not a site directory "
            "(it is on sys.path through PYTHONPATH or `pip install --target`)"
        )
    else:
        why = "its .pth file is in a site directory, yet the directory is not on sys.path (removed at run time?)"
    evidence = [
        f"importlib.machinery.PathFinder.find_spec('cutlass'): not found on sys.path ({where.path_entries} "
        "entries)",
        f"{listed.dist} {listed.version}: cutlass/__init__.py in {listed.packages_dir}",
        *(
            f"{p.path}: {'present' if p.exists else 'missing'}, {'read' if p.read else 'not read'} at start"
            for p in pth
        ),
    ]
    return make(
        "cutlass-dsl-off-path",
        backend="flashinfer",
        evidence=evidence,
        packages_dir=listed.packages_dir,
        why=why,
        path_command=_path_command(listed.packages_dir),
        **common,
    )


def _shadowed(where: DslPathFacts, listed: DslCopy | None, common: dict[str, Any]) -> Finding:
    owner = where.owner
    if not where.is_dsl:
        what = "another project's `cutlass` package"
        detail = f"{where.imported_from}/cutlass has no `cute` subpackage: it is not the CUTLASS DSL."
    elif owner is None:
        what = "a copy of the DSL no installed distribution lists"
        detail = f"No installed nvidia-cutlass-dsl distribution's RECORD lists {where.imported_from}/cutlass."
    else:
        what = f"{owner.dist} {owner.version}"
        detail = (
            f"{where.imported_from}/cutlass belongs to {owner.dist} {owner.version}, installed further down the "
            f"path than the {listed.dist + ' ' + listed.version if listed else 'DSL'} pip reports."
        )
    evidence = [
        f"importlib.machinery.PathFinder.find_spec('cutlass'): {where.imported_from}/cutlass",
        *(f"{c.dist} {c.version}: cutlass in {c.packages_dir}" for c in where.installed),
    ]
    return make(
        "cutlass-dsl-shadowed",
        backend="flashinfer",
        evidence=evidence,
        found=what,
        detail=detail,
        packages_dir=where.imported_from,
        **common,
    )


def _unavailable(kernels: tuple[KernelSource, ...]) -> str:
    messages = [GDN_KERNEL_MODULES[k.major][2] for k in kernels if k.major in GDN_KERNEL_MODULES]
    return messages[0] if messages else GDN_KERNEL_MODULES[9][2]


def _install_command(facts: Facts, installed: str | None) -> str:
    """pip, for the DSL this FlashInfer accepts: the installed version when it does (the files were fine,
    only where they sit was not), else the floor FlashInfer declares; with [cu13] when -libs-cu13 is
    installed."""
    fi = facts.flashinfer
    requirement = fi.cutlass_dsl_requirement or ""
    dsl = _installed_dsl(facts)
    extra = "[cu13]" if dsl is not None and dsl.get("nvidia-cutlass-dsl-libs-cu13") else ""
    accepted = installed is not None and _accepts(requirement, installed)
    floor = _floor(requirement)
    pin = f"=={installed}" if accepted else f"=={floor}" if floor else requirement
    return "pip install --force-reinstall " + _quoted(f"nvidia-cutlass-dsl{extra}{pin}")


def _accepts(requirement: str, version: str) -> bool:
    try:
        return SpecifierSet(requirement).contains(version, prereleases=True)
    except (InvalidSpecifier, InvalidVersion):
        return False
