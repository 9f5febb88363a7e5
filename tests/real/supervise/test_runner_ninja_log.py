"""Objects are shared with plain ninja both ways: a module prebuilt through jitguard is up to date for
FlashInfer's own `ninja`, and objects plain ninja built are not compiled again by jitguard."""

from __future__ import annotations

import subprocess
from pathlib import Path

from ninja_projects import write_project

from jitguard.supervise.runner import BuildOptions, run_ninja


def _plain_ninja(root: Path, *args: str) -> str:
    return subprocess.run(
        ["ninja", "-C", str(root), *args], capture_output=True, text=True, check=True
    ).stdout


def _started(journal: Path) -> int:
    return (
        sum(1 for line in journal.read_text().splitlines() if line.startswith("start"))
        if journal.exists()
        else 0
    )


def test_objects_built_by_jitguard_are_up_to_date_for_plain_ninja(tmp_path: Path, cache_dir: Path) -> None:
    project = write_project(tmp_path / "p", jobs=3, mib=5, seconds=0.1)
    run_ninja(project.root, project.manifest, module="shared", options=BuildOptions(jobs=2, progress="none"))
    assert _started(project.journal) == 3

    assert "no work to do" in _plain_ninja(project.root, "-n")
    # Incremental still works: touching one source makes plain ninja rebuild that object only.
    (project.root / "src1.c").write_text("int f1 = 1;\n")
    _plain_ninja(project.root)
    assert _started(project.journal) == 4


def test_objects_built_by_plain_ninja_are_not_compiled_again(tmp_path: Path, cache_dir: Path) -> None:
    project = write_project(tmp_path / "p", jobs=3, mib=5, seconds=0.1)
    _plain_ninja(project.root, "obj0.o", "obj1.o")  # a partial build, as an interrupted stock build leaves
    assert _started(project.journal) == 2

    result = run_ninja(
        project.root, project.manifest, module="shared", options=BuildOptions(jobs=2, progress="none")
    )

    assert result.attempts == 1
    assert _started(project.journal) == 3  # only obj2.o was compiled
    assert all(p.exists() for p in project.outputs)


def test_a_manifest_that_is_not_utf8_is_built_byte_for_byte(tmp_path: Path, cache_dir: Path) -> None:
    # ninja reads bytes: a Latin-1 path in a manifest is valid for it, so it must be for the runner too.
    root = tmp_path / "p"
    root.mkdir()
    name = "caf\xe9.txt".encode("latin-1")
    (root / "build.ninja").write_bytes(
        b"# written by a tool that speaks Latin-1\nrule copy\n  command = cp $in $out\n"
        b"build out.txt: copy " + name + b"\n"
    )
    (root / name.decode("utf-8", "surrogateescape")).write_text("made\n")
    options = BuildOptions(jobs=1, progress="none", cache_dir=cache_dir)

    result = run_ninja(root, root / "build.ninja", module="latin1", options=options)

    assert result.attempts == 1 and (root / "out.txt").read_text() == "made\n"
    assert "no work to do" in _plain_ninja(root)  # the same bytes: plain ninja agrees it is built
