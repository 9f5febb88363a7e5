"""Where the engine's ``import cutlass`` would find the CUTLASS DSL, and whether FlashInfer's GDN prefill kernel
for each GPU arch is there to import it: read from sys.path, the DSL's RECORDs and FlashInfer's source.

The DSL's packages sit one level below the site directory and reach sys.path through a ``.pth`` file, which
``pip install --target`` on PYTHONPATH, PEX or ``python -S`` skip: the metadata is there and the import fails,
and FlashInfer says so only at the first request. Nothing is imported (``doctor --deep`` does that:
``facts/import_probe.py``).
"""

from __future__ import annotations

import ast
import importlib.machinery
import importlib.metadata as metadata
import os
import re
import site
import sys
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from jitguard.facts.flashinfer import GDN_KERNEL_MODULES

PREFIX = "nvidia-cutlass-dsl"
PACKAGE = "cutlass"
_INIT = re.compile(r"^(?P<dir>(?:[^,]*/)?)cutlass/__init__\.py,", re.MULTILINE)
_PTH = re.compile(r"^(?P<name>[^/,]+\.pth),", re.MULTILINE)


@dataclass(frozen=True)
class DslCopy:
    """One installed DSL distribution that ships the ``cutlass`` package."""

    dist: str  # normalised, e.g. "nvidia-cutlass-dsl-libs-core"
    version: str
    packages_dir: str  # the directory holding its ``cutlass`` package (what its .pth puts on sys.path)
    present: bool  # its cutlass/__init__.py is on disk


@dataclass(frozen=True)
class PthFile:
    path: str
    exists: bool
    read: bool  # it sits in a directory Python reads .pth files in (a site directory, site enabled)


@dataclass(frozen=True)
class KernelSource:
    """FlashInfer's GDN prefill kernel module for one compute-capability major, and what it needs of the DSL."""

    major: int
    label: str  # "SM90"
    module: str
    path: str | None  # None: this FlashInfer does not ship it
    missing_imports: tuple[str, ...]  # ``cutlass.*`` modules it imports that the importable DSL lacks


@dataclass(frozen=True)
class DslPathFacts:
    imported_from: str | None  # the directory ``import cutlass`` would load the package from; None: not found
    is_dsl: bool  # that package is the DSL's (it has ``cute``), not another project's ``cutlass``
    owner: DslCopy | None  # the installed DSL distribution whose RECORD lists that package
    installed: tuple[
        DslCopy, ...
    ]  # every DSL distribution on the path that ships ``cutlass``, first = metadata's
    pth_files: tuple[PthFile, ...]  # the .pth files the first DSL's RECORDs list
    site_enabled: bool  # False under ``python -S``: no .pth file is read anywhere
    kernels: tuple[KernelSource, ...]  # per GPU major asked for, FlashInfer's CuTeDSL era only
    path_entries: int  # how many sys.path entries were searched
    seconds: float

    @property
    def metadata_copy(self) -> DslCopy | None:
        """The copy pip and ``importlib.metadata`` report (the first on the path)."""
        return self.installed[0] if self.installed else None


def normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def probe(
    flashinfer_dir: str | None, majors: Iterable[int] = (), *, path: Sequence[str] | None = None
) -> DslPathFacts:
    """``flashinfer_dir``: the ``flashinfer`` package directory (None: not installed); ``majors``: the GPUs'
    compute-capability majors (none known: SM90's kernel); ``path``: the engine's sys.path (default: this
    process's, which is the engine's when the plugin asks)."""
    start = time.perf_counter()
    entries = list(sys.path if path is None else path)
    imported_from = _find(entries, default_path=path is None)
    copies, pth_paths = _installed(entries)
    owner = None
    if imported_from is not None:
        owner = next(
            (c for c in copies if os.path.normpath(c.packages_dir) == os.path.normpath(imported_from)), None
        )
    pth_files = tuple(PthFile(p, Path(p).is_file(), _reads_pth(str(Path(p).parent))) for p in pth_paths)
    is_dsl = imported_from is not None and (Path(imported_from) / PACKAGE / "cute").is_dir()
    kernels = _kernels(flashinfer_dir, majors, imported_from if is_dsl else None)
    return DslPathFacts(
        imported_from=imported_from,
        is_dsl=is_dsl,
        owner=owner,
        installed=tuple(copies),
        pth_files=pth_files,
        site_enabled=not sys.flags.no_site,
        kernels=kernels,
        path_entries=len(entries),
        seconds=time.perf_counter() - start,
    )


def _find(entries: list[str], *, default_path: bool) -> str | None:
    """The directory the ``cutlass`` package would be imported from: an already imported one, else a scan of
    ``entries`` the way Python's path finder does it (nothing is executed)."""
    loaded = sys.modules.get(PACKAGE) if default_path else None
    origin = getattr(getattr(loaded, "__spec__", None), "origin", None) if loaded is not None else None
    if isinstance(origin, str):
        return str(Path(origin).parent.parent)
    try:
        spec = importlib.machinery.PathFinder.find_spec(PACKAGE, entries or None)
    except (ImportError, ValueError):
        return None
    if spec is None:
        return None
    if spec.origin and spec.origin not in ("namespace", "built-in"):
        return str(
            Path(spec.origin).parent.parent if spec.submodule_search_locations else Path(spec.origin).parent
        )
    locations = list(spec.submodule_search_locations or ())
    return str(Path(locations[0]).parent) if locations else None


def _installed(entries: list[str]) -> tuple[list[DslCopy], list[str]]:
    """Every DSL distribution on ``entries`` that ships ``cutlass`` (in path order), and where the .pth files
    the first of each name lists are installed."""
    copies: list[DslCopy] = []
    pth: list[str] = []
    seen: set[str] = set()
    for dist in metadata.distributions(path=entries):
        name = normalise(dist.metadata["Name"] or "")
        if not name.startswith(PREFIX):
            continue
        record = dist.read_text("RECORD") or ""
        first = name not in seen
        seen.add(name)
        if first:
            for m in _PTH.finditer(record):
                where = os.path.normpath(str(dist.locate_file(m.group("name"))))
                pth += [where] if where not in pth else []
        found = _INIT.search(record)
        if found is None:
            continue
        base = Path(str(dist.locate_file(found.group("dir") or ".")))
        packages_dir = os.path.normpath(str(base))
        copies.append(
            DslCopy(name, dist.version or "", packages_dir, (base / PACKAGE / "__init__.py").is_file())
        )
    return copies, pth


def _reads_pth(directory: str) -> bool:
    """Whether Python reads .pth files in ``directory`` at start: a site directory, with site enabled."""
    if sys.flags.no_site:
        return False
    sites = list(site.getsitepackages()) if hasattr(site, "getsitepackages") else []
    if site.ENABLE_USER_SITE:
        sites.append(site.getusersitepackages())
    wanted = os.path.realpath(directory)
    return any(os.path.realpath(s) == wanted for s in sites)


def _kernels(
    flashinfer_dir: str | None, majors: Iterable[int], dsl_dir: str | None
) -> tuple[KernelSource, ...]:
    if flashinfer_dir is None:
        return ()
    known = sorted(set(majors) & set(GDN_KERNEL_MODULES)) or [9]
    found = []
    for major in known:
        label, module, _ = GDN_KERNEL_MODULES[major]
        source = Path(flashinfer_dir, *module.split(".")[1:]).with_suffix(".py")
        if not source.is_file():
            found.append(KernelSource(major, label, module, None, ()))
            continue
        missing = _missing_imports(source, Path(dsl_dir)) if dsl_dir is not None else ()
        found.append(KernelSource(major, label, module, str(source), missing))
    return tuple(found)


def _missing_imports(source: Path, dsl_dir: Path) -> tuple[str, ...]:
    """The ``cutlass.*`` modules ``source`` imports at its top level that ``dsl_dir`` lacks (a DSL of another
    version than the kernel was written for)."""
    try:
        tree = ast.parse(source.read_bytes(), filename=str(source))
    except (OSError, SyntaxError, ValueError):
        return ()
    wanted: list[str] = []
    for node in tree.body:
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]  # a name imported from it may be a submodule or an attribute: not checked
        wanted += [n for n in names if n.split(".")[0] == PACKAGE and n not in wanted]
    return tuple(n for n in wanted if not _is_module(dsl_dir, n))


def _is_module(root: Path, dotted: str) -> bool:
    parts = dotted.split(".")
    base = root.joinpath(*parts)
    if (base / "__init__.py").is_file() or base.with_suffix(".py").is_file():
        return True
    return base.is_dir() or any(base.parent.glob(f"{parts[-1]}.*.so"))
