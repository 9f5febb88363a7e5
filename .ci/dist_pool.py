"""A pool of installed distributions, one directory each, shared by the engine releases .ci/install_*.sh prepare.

Each vLLM release needs ~90 pure-Python distributions the test interpreter lacks, mostly the same name==version
from one release to the next, and each engine release needs the flashinfer-python and nvidia-cutlass-dsl it
pins, often the same as another engine's. Installing them per release cost minutes each (unpacking ~700 MB).
Here every distinct name==version is installed once (``pip install --no-deps --no-compile --target``) into
``POOL/<name>-<version>/``, and a release's layer is a farm of hard links to the entries it needs: seconds, and
no second copy on disk. The pool is keyed by the interpreter's tag and platform (the caller picks the
directory), never by the rest of the environment: an entry is the same files whichever venv asks.

absent POOL REQ...          the requirements (``name==version``) that have no entry in POOL yet
add [--each] POOL REQ...    download them (one pip run), install them (one pip run) and split its output
                            into one entry per distribution, by each one's RECORD (the caller holds the
                            pool's lock). --each: one install run per wheel, for siblings that list the same
                            path with different contents (the DSL's wheels): one run keeps one copy of it.
link POOL DEST REQ...       hard-link the entries of REQ into DEST, in order: where two list the same path,
                            the later one's file is the one left, as a later install would leave it
pins [--family PREFIX] SPEC...
                            what pip would install for SPEC on its own (``--ignore-installed``), exact pins in
                            pip's install order: with --family, the whole closure's distributions whose names
                            start with PREFIX (e.g. the DSL's sibling wheels that its extras select); without,
                            SPEC alone, its dependencies left out (asks the index, installs nothing)
tag                         this interpreter's pool key, e.g. ``cpython-311-linux-x86_64``
"""

from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version


def entry_name(requirement: str) -> str:
    """``Name==1.0.post1`` -> ``name-1.0.post1``: the pool directory of an exact pin."""
    name, sep, version = requirement.partition("==")
    if not sep or not version or any(c in version for c in ",;<>=!~ "):
        raise SystemExit(f"dist_pool.py: not an exact pin (name==version): {requirement!r}")
    return f"{canonicalize_name(name)}-{Version(version)}"


def absent(pool: Path, requirements: list[str]) -> list[str]:
    return [r for r in requirements if not (pool / entry_name(r)).is_dir()]


def _metadata(dist_info: Path) -> tuple[str, str]:
    name = version = ""
    for line in (dist_info / "METADATA").read_text(errors="replace").splitlines():
        if line.startswith("Name:"):
            name = line.split(":", 1)[1].strip()
        elif line.startswith("Version:"):
            version = line.split(":", 1)[1].strip()
        elif not line:
            break
    return name, version


PIP = ["-m", "pip", "--disable-pip-version-check", "--no-input"]


def add(pool: Path, requirements: list[str], *, each: bool = False) -> None:
    """Download ``requirements`` (one pip run: the index is asked once), install them into a staging
    directory (one pip run, or with ``each`` one per wheel, from the downloaded files only), then move each
    distribution's files (as its RECORD lists them; scripts outside the site directory are left behind) into a
    new entry, renamed into place."""
    wanted = {entry_name(r) for r in requirements}
    staging = pool / f".staging-{os.getpid()}"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    try:
        wheels = staging / "wheels"
        _pip("download", "--no-deps", "--dest", str(wheels), *requirements)
        files = sorted(str(w) for w in wheels.iterdir())
        made: dict[str, Path] = {}
        for group in [[f] for f in files] if each else [files]:
            site = staging / f"site-{len(made)}"
            _pip("install", "--no-deps", "--no-compile", "--no-index", "--target", str(site), *group)
            made.update(_split(site, staging / "entries"))
        if wanted - made.keys():
            raise SystemExit(f"dist_pool.py: pip installed no {', '.join(sorted(wanted - made.keys()))}")
        for key, entry in made.items():
            if key in wanted and not (pool / key).exists():
                entry.rename(pool / key)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _pip(*args: str) -> None:
    subprocess.run([sys.executable, *PIP, *args], check=True, stdin=subprocess.DEVNULL)


def _split(site: Path, entries: Path) -> dict[str, Path]:
    """Move the files of each distribution installed in ``site`` into ``entries/<name>-<version>``."""
    made = {}
    for dist_info in sorted(site.glob("*.dist-info")):
        name, version = _metadata(dist_info)
        key = f"{canonicalize_name(name)}-{Version(version)}"
        entry = entries / key
        with (dist_info / "RECORD").open(newline="") as f:
            paths = [row[0] for row in csv.reader(f) if row and not row[0].startswith("..")]
        for relative in paths:
            source = site / relative
            if source.is_file():
                (entry / relative).parent.mkdir(parents=True, exist_ok=True)
                source.rename(entry / relative)
        made[key] = entry
    return made


def link(pool: Path, dest: Path, requirements: list[str]) -> int:
    count = 0
    for requirement in requirements:
        entry = pool / entry_name(requirement)
        if not entry.is_dir():
            raise SystemExit(f"dist_pool.py: {requirement} is not in {pool} (run 'add' first)")
        for directory, _, files in os.walk(entry):
            target_dir = dest / Path(directory).relative_to(entry)
            target_dir.mkdir(parents=True, exist_ok=True)
            for file in files:
                target = target_dir / file
                if target.exists() or target.is_symlink():
                    target.unlink()
                os.link(Path(directory) / file, target)
                count += 1
    return count


def pins(specs: list[str], family: str | None) -> list[str]:
    command = [sys.executable, *PIP, "install", "--dry-run", "--ignore-installed", "--quiet", "--report", "-"]
    proc = subprocess.run(
        command + ([] if family else ["--no-deps"]) + specs,
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
    )
    if proc.returncode != 0:
        raise SystemExit(f"dist_pool.py: pip cannot resolve {' '.join(specs)}:\n{proc.stderr[-2000:]}")
    items = {}
    for item in json.loads(proc.stdout)["install"]:
        meta = item["metadata"]
        if family is None or canonicalize_name(meta["name"]).startswith(canonicalize_name(family)):
            needs = {canonicalize_name(Requirement(r).name) for r in meta.get("requires_dist") or []}
            items[canonicalize_name(meta["name"])] = (f"{meta['name']}=={meta['version']}", needs)
    return [items[name][0] for name in _dependencies_first(items)]


def _dependencies_first(items: dict[str, tuple[str, set[str]]]) -> list[str]:
    """pip's install order: a distribution after every one (of ``items``) it requires; ties by name. The
    report lists them in resolution order, which is not it (the DSL's -libs-core came after -libs-base)."""
    done: list[str] = []
    while len(done) < len(items):
        ready = sorted(
            n for n, (_, needs) in items.items() if n not in done and needs & items.keys() <= {*done}
        )
        if not ready:
            raise SystemExit(f"dist_pool.py: a dependency cycle among {', '.join(sorted(items))}")
        done.append(ready[0])
    return done


def tag() -> str:
    return f"{sys.implementation.cache_tag}-{sysconfig.get_platform()}"


def main(argv: list[str]) -> int:
    lines: list[str] = []
    if len(argv) >= 2 and argv[0] == "absent":
        lines = absent(Path(argv[1]), argv[2:])
    elif len(argv) >= 3 and argv[:2] == ["add", "--each"]:
        add(Path(argv[2]), argv[3:], each=True)
    elif len(argv) >= 2 and argv[0] == "add":
        add(Path(argv[1]), argv[2:])
    elif len(argv) >= 3 and argv[0] == "link":
        lines = [f"linked {link(Path(argv[1]), Path(argv[2]), argv[3:])} files"]
    elif len(argv) >= 3 and argv[:2] == ["pins", "--family"]:
        lines = pins(argv[3:], argv[2])
    elif len(argv) >= 2 and argv[0] == "pins":
        lines = pins(argv[1:], None)
    elif argv == ["tag"]:
        lines = [tag()]
    else:
        print(__doc__, file=sys.stderr)
        return 2
    for line in lines:
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
