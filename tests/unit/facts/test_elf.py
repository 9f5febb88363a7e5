"""ELF version readers and version ordering, on this machine's own libstdc++ and on non-ELF input."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from jitguard.facts import elf


def _system_libstdcxx() -> Path:
    for name in ("c++", "g++"):
        try:
            out = subprocess.run(
                [name, "-print-file-name=libstdc++.so.6"], capture_output=True, text=True
            ).stdout
        except OSError:
            continue
        if os.path.isabs(out.strip()):
            return Path(out.strip()).resolve()
    pytest.skip("no libstdc++.so.6 on this machine")


def test_versions_sort_numerically_not_lexically() -> None:
    names = ["GLIBCXX_3.4.10", "GLIBCXX_3.4.9", "GLIBCXX_3.4", "GLIBCXX_3.4.30"]
    assert sorted(names, key=elf.version_key) == [
        "GLIBCXX_3.4",
        "GLIBCXX_3.4.9",
        "GLIBCXX_3.4.10",
        "GLIBCXX_3.4.30",
    ]


def test_max_version_picks_the_newest_of_one_family_only() -> None:
    names = ["GLIBCXX_3.4.29", "GLIBCXX_3.4.30", "CXXABI_1.3.13", "GLIBCXX_LDBL_3.4.31", "CXXABI_TM_1"]
    assert elf.max_version(names, "GLIBCXX") == "GLIBCXX_3.4.30"
    assert elf.max_version(names, "CXXABI") == "CXXABI_1.3.13"
    assert elf.max_version(names, "GLIBC") is None
    assert elf.versions_with_prefix(names, "CXXABI") == ("CXXABI_1.3.13",)


def test_version_tuple() -> None:
    assert elf.version_tuple("GLIBCXX_3.4.30") == (3, 4, 30)
    assert elf.version_tuple("CXXABI_1.3") == (1, 3)


def test_defined_versions_of_libstdcxx_lists_version_nodes_not_the_soname() -> None:
    versions = elf.defined_versions(_system_libstdcxx())
    assert "GLIBCXX_3.4" in versions and "CXXABI_1.3" in versions
    assert "libstdc++.so.6" not in versions
    glibcxx = elf.versions_with_prefix(versions, "GLIBCXX")
    assert list(glibcxx) == sorted(glibcxx, key=elf.version_key)


def test_needed_versions_are_grouped_by_library() -> None:
    needed = elf.needed_versions(_system_libstdcxx())
    assert "libc.so.6" in needed
    assert all(v.startswith("GLIBC_") for v in needed["libc.so.6"])


def test_dynamic_info_reads_soname_and_needed() -> None:
    info = elf.dynamic_info(_system_libstdcxx())
    assert info.soname == "libstdc++.so.6"
    assert "libc.so.6" in info.needed


@pytest.mark.parametrize(
    ("dtags", "field"), [("--disable-new-dtags", "rpath"), ("--enable-new-dtags", "runpath")]
)
def test_dynamic_info_expands_origin_in_rpath_and_runpath(tmp_path: Path, dtags: str, field: str) -> None:
    if shutil.which("gcc") is None:
        pytest.skip("needs gcc")
    (tmp_path / "a.c").write_text("int a(void) { return 1; }\n")
    out = tmp_path / "sub" / "liba.so"
    out.parent.mkdir()
    argv = ["gcc", "-shared", "-fPIC", f"-Wl,{dtags}", "-Wl,-rpath,$ORIGIN/../lib", "a.c", "-o", str(out)]
    subprocess.run(argv, cwd=tmp_path, check=True, capture_output=True, timeout=60)
    info = elf.dynamic_info(out)
    assert getattr(info, field) == (f"{out.parent.resolve()}/../lib",)


def test_a_file_that_is_not_elf_raises_elf_read_error(tmp_path: Path) -> None:
    text = tmp_path / "libfake.so"
    text.write_text("INPUT(-lfoo)\n")  # a linker script named like a library
    with pytest.raises(elf.ElfReadError, match="not a readable ELF"):
        elf.defined_versions(text)


def test_a_missing_file_raises_elf_read_error(tmp_path: Path) -> None:
    with pytest.raises(elf.ElfReadError, match="cannot read"):
        elf.needed_versions(tmp_path / "absent.so")


def test_a_truncated_elf_file_raises_elf_read_error(tmp_path: Path) -> None:
    truncated = tmp_path / "libtruncated.so"
    truncated.write_bytes(_system_libstdcxx().read_bytes()[:3000])
    for reader in (elf.defined_versions, elf.needed_versions, elf.dynamic_info):
        with pytest.raises(elf.ElfReadError):
            reader(truncated)
