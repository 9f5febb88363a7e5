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
import json
import os
import re
import shutil
import subprocess
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


def _site_dirs(python: Path) -> list[Path]:
    script = "import json, site; print(json.dumps([*site.getsitepackages(), site.getusersitepackages()]))"
    out = subprocess.run([str(python), "-c", script], capture_output=True, text=True, check=True).stdout
    return [Path(p) for p in json.loads(out) if Path(p).is_dir()]


def _is_dsl(name: str) -> bool:
    return name.lower().startswith("nvidia_cutlass_dsl")


def python_without_dsl(root: Path, python: Path | str = sys.executable) -> Path:
    """The python of a real venv at ``root`` (site enabled, .pth files read) made from ``python``'s
    interpreter and holding its packages (as links) but no nvidia-cutlass-dsl: the machine of a user whose DSL
    came with ``pip install --target`` onto PYTHONPATH (``dsl_target``). ``python``'s own DSL would otherwise
    rescue such a path: its .pth inserts the ``dsl_packages`` of the first ``nvidia_cutlass_dsl`` portion on
    sys.path, the PYTHONPATH one."""
    subprocess.run([str(python), "-m", "venv", "--without-pip", str(root)], check=True)
    [target] = list((root / "lib").glob("python3*/site-packages"))
    for site_dir in _site_dirs(Path(python)):
        if site_dir.resolve() != target.resolve():
            _mirror(site_dir, target, root / "parents")
    return root / "bin" / "python"


_ADDSITEDIR = re.compile(r"site\.addsitedir\((['\"])(?P<dir>[^'\"]+)\1\)")


def _mirror(site_dir: Path, target: Path, parents: Path) -> None:
    """``site_dir``'s entries as links in ``target``, less the DSL's; a .pth that adds another site directory
    (a release venv layered on this one) adds a mirror of it instead, made the same way."""
    for entry in site_dir.iterdir():
        if (
            _is_dsl(entry.name)
            or entry.name.lower().startswith("__editable__")
            or (target / entry.name).exists()
        ):
            continue
        text = entry.read_text(errors="replace") if entry.suffix == ".pth" and entry.is_file() else ""
        added = _ADDSITEDIR.search(text)
        if added is None:
            (target / entry.name).symlink_to(entry)
            continue
        mirror = parents / f"{len(list(parents.glob('*'))) if parents.exists() else 0}"
        mirror.mkdir(parents=True)
        _mirror(Path(added.group("dir")), mirror, parents)
        (target / entry.name).write_text(text.replace(added.group("dir"), str(mirror)))


def dsl_target(root: Path, python: Path | str = sys.executable) -> Path:
    """``python``'s installed DSL (its ``nvidia_cutlass_dsl*`` entries, the .pth among them, as links) in a
    directory of its own, as ``pip install --target root`` leaves it: for PYTHONPATH, where no .pth is read."""
    root.mkdir(parents=True)
    for site_dir in _site_dirs(Path(python)):
        for entry in site_dir.iterdir():
            if _is_dsl(entry.name) and not (root / entry.name).exists():
                (root / entry.name).symlink_to(entry)
    return root
