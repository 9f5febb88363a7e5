"""The nvidia-cutlass-dsl RECORD check on real installed distributions: small ones made in a temporary site
directory (tests/lib/fake_dists.py, files and RECORD as pip writes them), the real DSL 4.8.x that flashinfer-python
brought into this venv, and a copy of it with a file damaged for real (tests/lib/dsl_copies.py)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from dsl_copies import copy_dsl, dsl_file, installed_dsl
from fake_dists import make_dist, make_installed
from jitguard.cutedsl import dsl_install
from jitguard.facts import Unavailable, collect

BASE = "nvidia-cutlass-dsl-libs-base"
CU13 = "nvidia-cutlass-dsl-libs-cu13"
SHARED = "nvidia_cutlass_dsl/lib/libcute_dsl_runtime.so"


def base_and_cu13(site: Path, *, winner: str) -> None:
    """libs-base and libs-cu13 4.5.2 as they are on PyPI: both list SHARED with different contents (NVIDIA/cutlass
    #3259); ``winner``'s copy is the one on disk, as when that wheel was extracted last."""
    make_installed(
        site, BASE, "4.5.2", {SHARED: b"base runtime" * 100, "nvidia_cutlass_dsl/base.py": b"x = 1\n"}
    )
    make_installed(
        site, CU13, "4.5.2", {SHARED: b"cu13 runtime" * 100, "nvidia_cutlass_dsl/cu13.py": b"y = 2\n"}
    )
    (site / SHARED).write_bytes((b"base runtime" if winner == BASE else b"cu13 runtime") * 100)


def check(site: Path, name: str) -> dsl_install.DistCheck:
    found = dsl_install.probe([str(site)]).get(name)
    assert found is not None, name
    return found


def test_an_intact_install_checks_every_file_with_a_hash(tmp_path: Path) -> None:
    make_installed(
        tmp_path, BASE, "4.8.1", {"nvidia_cutlass_dsl/a.py": b"a\n", "nvidia_cutlass_dsl/b.so": b"\x7fELF"}
    )
    facts = dsl_install.probe([str(tmp_path)])
    (only,) = facts.dists
    assert (only.name, only.version, only.location) == (BASE, "4.8.1", str(tmp_path))
    assert only.files_checked == 4  # a.py, b.so, METADATA, INSTALLER; RECORD carries no hash
    assert only.intact and only.missing == () and only.differ == () and only.unverifiable is None


def test_a_corrupted_file_differs_and_matches_no_wheel(tmp_path: Path) -> None:
    make_installed(tmp_path, CU13, "4.8.1", {"nvidia_cutlass_dsl/cu13/lib/rt.so": b"\x7fELF good bytes"})
    (tmp_path / "nvidia_cutlass_dsl/cu13/lib/rt.so").write_bytes(b"\x7fELF badd bytes")  # same size
    got = check(tmp_path, CU13)
    assert not got.intact
    (differs,) = got.differ
    assert (differs.path, differs.size, differs.listed_by, differs.matches) == (
        "nvidia_cutlass_dsl/cu13/lib/rt.so",
        15,
        (),
        None,
    )


def test_a_deleted_file_is_missing(tmp_path: Path) -> None:
    make_installed(
        tmp_path, BASE, "4.8.1", {"nvidia_cutlass_dsl/a.py": b"a\n", "nvidia_cutlass_dsl/b.py": b"b\n"}
    )
    (tmp_path / "nvidia_cutlass_dsl/b.py").unlink()
    got = check(tmp_path, BASE)
    assert got.missing == ("nvidia_cutlass_dsl/b.py",) and got.differ == ()


def test_a_file_of_a_size_no_wheel_lists_is_told_apart_without_reading_it(tmp_path: Path) -> None:
    make_installed(tmp_path, BASE, "4.8.1", {"nvidia_cutlass_dsl/big.so": b"\0" * 4096})
    (tmp_path / "nvidia_cutlass_dsl/big.so").write_bytes(b"\0" * 100)  # truncated
    facts = dsl_install.probe([str(tmp_path)])
    (differs,) = facts.dists[0].differ
    assert (differs.size, differs.matches) == (100, None)
    metadata_files = sum(f.stat().st_size for f in tmp_path.glob("*.dist-info/[MI]*"))
    assert facts.bytes_hashed == metadata_files  # the truncated file itself was never read


def test_a_shared_path_names_the_sibling_whose_copy_it_holds(tmp_path: Path) -> None:
    base_and_cu13(tmp_path, winner=CU13)
    facts = dsl_install.probe([str(tmp_path)])
    base, cu13 = facts.get(BASE), facts.get(CU13)
    assert base is not None and cu13 is not None
    (differs,) = base.differ
    assert (differs.path, differs.listed_by, differs.matches) == (SHARED, (CU13,), CU13)
    assert cu13.intact
    assert (base.shares_paths_with, cu13.shares_paths_with) == ((CU13,), (BASE,))


def test_only_nvidia_cutlass_dsl_distributions_are_checked(tmp_path: Path) -> None:
    make_installed(tmp_path, "nvidia-cutlass", "3.9.0", {"cutlass_library/x.py": b"x\n"})
    make_installed(tmp_path, "flashinfer-python", "0.6.18", {"flashinfer/x.py": b"x\n"})
    make_installed(tmp_path, "nvidia-cutlass-dsl", "4.8.1", {})
    assert [d.name for d in dsl_install.probe([str(tmp_path)]).dists] == ["nvidia-cutlass-dsl"]


def test_a_distribution_without_a_record_is_unverifiable_and_the_others_still_checked(tmp_path: Path) -> None:
    make_dist(tmp_path, "nvidia-cutlass-dsl", "4.8.1")  # METADATA only, as some installers leave it
    make_installed(tmp_path, BASE, "4.8.1", {"nvidia_cutlass_dsl/a.py": b"a\n"})
    facts = dsl_install.probe([str(tmp_path)])
    main, base = facts.get("nvidia-cutlass-dsl"), facts.get(BASE)
    assert main is not None and base is not None
    assert main.unverifiable is not None and "no RECORD" in main.unverifiable and not main.intact
    assert base.intact


def test_asking_again_reads_nothing_until_a_file_changes(tmp_path: Path) -> None:
    make_installed(tmp_path, BASE, "4.8.1", {"nvidia_cutlass_dsl/a.so": b"first" * 1000})
    first = dsl_install.probe([str(tmp_path)])
    again = dsl_install.probe([str(tmp_path)])
    assert first.bytes_hashed > 5000 and again.bytes_hashed == 0
    assert again.dists == first.dists
    changed = tmp_path / "nvidia_cutlass_dsl/a.so"
    stat = changed.stat()
    changed.write_bytes(b"other" * 1000)  # same size: only the mtime tells the cache
    os.utime(changed, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))
    after = dsl_install.probe([str(tmp_path)])
    assert after.bytes_hashed == 5000
    assert [d.path for d in after.dists[0].differ] == ["nvidia_cutlass_dsl/a.so"]


# --- the real DSL


def test_the_real_installed_dsl_is_intact() -> None:
    real = installed_dsl()
    facts = dsl_install.probe()
    assert {d.name for d in facts.dists} == {(d.metadata["Name"] or "").lower() for d in real}
    for d in facts.dists:
        assert d.intact, (d.name, d.missing[:3], d.differ[:3], d.unverifiable)
    assert sum(d.files_checked for d in facts.dists) > 100


def test_a_copy_of_the_real_dsl_with_one_file_overwritten_is_caught(tmp_path: Path) -> None:
    runtime = dsl_file("nvidia-cutlass-dsl-libs-cu13", "libcute_dsl_runtime.so")
    site = copy_dsl(tmp_path / "env", copied=[runtime])
    with (site / runtime).open("r+b") as f:  # a few bytes of a 40 MB library, as a torn write leaves it
        f.seek(4096)
        f.write(b"\xff" * 16)
    facts = dsl_install.probe([str(site)])
    cu13 = facts.get("nvidia-cutlass-dsl-libs-cu13")
    assert cu13 is not None and cu13.location == str(site)
    assert [(d.path, d.matches) for d in cu13.differ] == [(runtime, None)]
    assert cu13.missing == () and all(d.intact for d in facts.dists if d is not cu13)


# --- in collect()


def test_collect_checks_the_dsl_in_the_cutedsl_era_only(site: Path, tmp_path: Path) -> None:
    installed_dsl()
    env = {"HOME": str(tmp_path), "PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    env["FLASHINFER_WORKSPACE_BASE"] = str(tmp_path / "ws")
    nvcc_era = collect(env, cache_dir=tmp_path / "cache")
    if nvcc_era.flashinfer.era == "cutedsl":
        pytest.skip("this machine's own FlashInfer is of the CuTeDSL era: no nvcc-era contrast")
    assert nvcc_era.dsl_install is None
    make_dist(site, "flashinfer-python", "0.6.18", requires=("nvidia-cutlass-dsl>=4.6.2a0",))
    facts = collect(env, cache_dir=tmp_path / "cache")
    assert facts.flashinfer.era == "cutedsl"
    assert facts.dsl_install is not None and "dsl_install" not in facts.unavailable
    assert "nvidia-cutlass-dsl" in [d.name for d in facts.dsl_install.dists]


def test_a_dsl_probe_that_raises_is_an_unavailable_fact_not_a_crash(
    site: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from jitguard.findings import checks_packages

    def broken(*args: object, **kwargs: object) -> None:
        raise PermissionError("[Errno 13] Permission denied: 'RECORD'")

    monkeypatch.setattr(dsl_install, "probe", broken)  # what tests/lib/breakage.py's inject does in a child
    make_dist(site, "flashinfer-python", "0.6.18", requires=("nvidia-cutlass-dsl>=4.6.2a0",))
    env = {"HOME": str(tmp_path), "PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    facts = collect(env, cache_dir=tmp_path / "cache")
    assert isinstance(facts.dsl_install, Unavailable)
    assert facts.unavailable["dsl_install"] == "PermissionError: [Errno 13] Permission denied: 'RECORD'"
    found = checks_packages.check(facts, "flashinfer")
    unknown = [f for f in found if f.code == "fact-unavailable"]
    assert len(unknown) == 1 and "dsl_install" in unknown[0].title
    assert "flashinfer-cutedsl-compiles-per-process" in [f.code for f in found]  # the rest still checked


def test_copy_dsl_leaves_the_installed_dsl_untouched(tmp_path: Path) -> None:
    runtime = dsl_file("nvidia-cutlass-dsl-libs-cu13", "libcute_dsl_runtime.so")
    site = copy_dsl(tmp_path / "env", copied=[runtime])
    (site / runtime).write_bytes(b"gone")
    assert not (site / runtime).is_symlink()
    assert all(d.intact for d in dsl_install.probe().dists)
    shutil.rmtree(tmp_path / "env")


# --- the digests kept in jitguard's cache dir for the next process

PROBE = (
    "import sys\nfrom pathlib import Path\nfrom jitguard.cutedsl import dsl_install\n"
    "f = dsl_install.probe([sys.argv[1]], cache_dir=Path(sys.argv[2]))\n"
    "print(f.bytes_hashed, [(d.name, d.intact) for d in f.dists])\n"
)


def probe_in_a_new_process(site: Path, cache_dir: Path) -> str:
    done = subprocess.run(
        [sys.executable, "-c", PROBE, str(site), str(cache_dir)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_the_next_process_reads_nothing_and_a_kept_digest_never_makes_a_file_differ(tmp_path: Path) -> None:
    site, cache = tmp_path / "site", tmp_path / "cache"
    site.mkdir()
    make_installed(site, BASE, "4.8.1", {"nvidia_cutlass_dsl/a.so": b"first" * 1000})
    intact = f"[('{BASE}', True)]"

    def run() -> tuple[int, str]:
        read, _, dists = probe_in_a_new_process(site, cache).partition(" ")
        return int(read), dists

    read, dists = run()
    assert read > 5000 and dists == intact
    kept = cache / dsl_install.DIGESTS_FILE
    assert kept.is_file() and (kept.stat().st_mode & 0o777) == 0o600
    assert run() == (0, intact)  # every digest came from the kept file
    # wrong digests kept (an edited or stale file): each file is read again and found intact, not damaged
    data = json.loads(kept.read_text())
    for item in data["digests"]:
        item[6] = "A" * 43
    kept.write_text(json.dumps(data))
    read, dists = run()
    assert read > 5000 and dists == intact
    assert run() == (0, intact)  # and the right digests are kept again
    # a kept file others can write is never read: the DSL is hashed again
    kept.chmod(0o666)
    read, dists = run()
    assert read > 5000 and dists == intact
