"""A copy of this machine's real nvidia-cutlass-dsl install (the wheels flashinfer-python brought), to damage
for real without touching the original: the dist-info directories are copied, every file their RECORD lists is
a symlink to the installed one, except the files asked for, which are real copies to overwrite.

The copy lives in ``<root>/lib/pythonX.Y/site-packages`` so that RECORD entries outside the site directory
(``../../../bin/run-iket``) land inside ``root`` too. Put it first on sys.path (or PYTHONPATH): importlib.metadata
then reads the copies' RECORDs, and the DSL's own .pth (``import nvidia_cutlass_dsl``, a namespace package, then
``sys.path.insert(0, <its first portion>/dsl_packages)``) makes Python import ``cutlass`` from the copy.
"""

from __future__ import annotations

import importlib.metadata as metadata
import os
import shutil
import sys
from collections.abc import Iterable
from pathlib import Path

import pytest

PREFIX = "nvidia-cutlass-dsl"


def installed_dsl(path: list[str] | None = None) -> list[metadata.Distribution]:
    """The real DSL's distributions (the first of each name on ``path``, default sys.path); skips the test when
    there are none."""
    found: dict[str, metadata.Distribution] = {}
    for dist in metadata.distributions(**({} if path is None else {"path": path})):
        name = (dist.metadata["Name"] or "").lower().replace("_", "-")
        if name.startswith(PREFIX) and name not in found:
            found[name] = dist
    if not found:
        pytest.skip("nvidia-cutlass-dsl is not installed here (flashinfer-python brings it)")
    return list(found.values())


def copy_dsl(root: Path, *, copied: Iterable[str] = (), path: list[str] | None = None) -> Path:
    """The copy's site directory; ``copied``: RECORD paths to make real (writable) copies instead of links;
    ``path``: where to find the DSL (default sys.path)."""
    real_copies = set(copied)
    site = root / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"
    site.mkdir(parents=True)
    for dist in installed_dsl(path):
        origin = Path(str(dist.locate_file("")))
        for file in dist.files or ():
            source = Path(os.path.normpath(origin / file))
            target = Path(os.path.normpath(site / file))
            if not source.is_file() or target.exists() or target.is_symlink():
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            if ".dist-info" in str(file) or str(file) in real_copies:
                shutil.copyfile(source, target)
            else:
                target.symlink_to(source)
    missing = [p for p in real_copies if not (site / p).is_file() or (site / p).is_symlink()]
    assert not missing, f"not files of the installed DSL: {missing}"
    return site


def dsl_file(name: str, suffix: str) -> str:
    """The RECORD path of the installed DSL distribution ``name`` that ends with ``suffix`` (skips when none)."""
    for dist in installed_dsl():
        if (dist.metadata["Name"] or "").lower() == name:
            for file in dist.files or ():
                if str(file).endswith(suffix):
                    return str(file)
    pytest.skip(f"the installed DSL has no {name} file ending with {suffix}")


def python_without_dsl(root: Path) -> Path:
    """The python of a real venv at ``root`` (site enabled, .pth files read) holding this interpreter's
    packages (as links) but no nvidia-cutlass-dsl: the machine of a user whose DSL came with ``pip install
    --target`` onto PYTHONPATH. This venv's own DSL would otherwise rescue such a path: its .pth inserts the
    ``dsl_packages`` of the first ``nvidia_cutlass_dsl`` portion on sys.path, the PYTHONPATH one."""
    import site
    import venv

    venv.create(root, with_pip=False)
    [target] = list((root / "lib").glob("python3*/site-packages"))
    for site_dir in map(Path, [*site.getsitepackages(), site.getusersitepackages()]):
        if not site_dir.is_dir() or site_dir.resolve() == target.resolve():
            continue
        for entry in site_dir.iterdir():
            name = entry.name.lower()
            hidden = name.startswith("nvidia_cutlass_dsl") or name.startswith("__editable__")
            if not hidden and not (target / entry.name).exists():
                (target / entry.name).symlink_to(entry)
    return root / "bin" / "python"
