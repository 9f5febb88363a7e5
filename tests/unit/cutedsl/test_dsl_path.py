"""Where ``import cutlass`` would find the DSL, read from a path with nothing imported: a real copy of this venv's
nvidia-cutlass-dsl (tests/lib/dsl_copies.py), its packages on the path or not, and another project's ``cutlass``."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from dsl_copies import copy_dsl
from fake_dists import make_dist
from jitguard.cutedsl import dsl_install, dsl_path
from jitguard.facts import Unavailable, collect


def packages_of(site: Path) -> Path:
    found = [site / "nvidia_cutlass_dsl" / sub for sub in ("dsl_packages", "python_packages")]
    return next(p for p in found if p.is_dir())


def test_a_dsl_on_a_path_without_its_packages_dir_is_installed_but_not_importable(tmp_path: Path) -> None:
    site = copy_dsl(tmp_path / "target")
    found = dsl_path.probe(None, path=[str(site)])
    assert found.imported_from is None and not found.is_dsl
    assert found.metadata_copy is not None
    assert found.metadata_copy.packages_dir == str(packages_of(site))
    assert found.metadata_copy.present
    assert found.pth_files and all(p.exists and not p.read for p in found.pth_files)


def test_its_packages_dir_on_the_path_makes_it_importable_and_owned(tmp_path: Path) -> None:
    site = copy_dsl(tmp_path / "target")
    found = dsl_path.probe(None, path=[str(site), str(packages_of(site))])
    assert found.imported_from == str(packages_of(site))
    assert found.is_dsl and found.owner == found.metadata_copy


def test_another_cutlass_first_is_found_and_is_not_the_dsl(tmp_path: Path) -> None:
    site = copy_dsl(tmp_path / "target")
    (tmp_path / "other" / "cutlass").mkdir(parents=True)
    (tmp_path / "other" / "cutlass" / "__init__.py").write_text("")
    found = dsl_path.probe(None, path=[str(tmp_path / "other"), str(site), str(packages_of(site))])
    assert found.imported_from == str(tmp_path / "other")
    assert not found.is_dsl and found.owner is None


def test_a_missing_kernel_module_and_missing_cutlass_imports_are_read_from_source(tmp_path: Path) -> None:
    site = copy_dsl(tmp_path / "target")
    kernel = tmp_path / "flashinfer" / "gdn_kernels" / "delta_rule_dsl" / "delta_rule_sm90.py"
    kernel.parent.mkdir(parents=True)
    kernel.write_text("import cutlass\nimport cutlass.cute as cute\nfrom cutlass.no_such_module import x\n")
    found = dsl_path.probe(str(tmp_path / "flashinfer"), [9, 10], path=[str(site), str(packages_of(site))])
    sm90, sm100 = found.kernels
    assert (sm90.label, sm90.path, sm90.missing_imports) == ("SM90", str(kernel), ("cutlass.no_such_module",))
    assert (sm100.label, sm100.path) == ("SM100", None)


def test_a_dsl_path_probe_that_raises_is_an_unavailable_fact_not_a_crash(
    site: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from jitguard.findings import checks_packages

    def broken(*args: object, **kwargs: object) -> None:
        raise PermissionError("[Errno 13] Permission denied: 'RECORD'")

    monkeypatch.setattr(dsl_path, "probe", broken)
    monkeypatch.setattr(dsl_install, "probe", lambda *a, **k: dsl_install.DslInstallFacts((), 0, 0.0))
    make_dist(site, "flashinfer-python", "0.6.18", requires=("nvidia-cutlass-dsl>=4.6.2a0",))
    env = {"HOME": str(tmp_path), "PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    facts = collect(env, cache_dir=tmp_path / "cache")
    assert isinstance(facts.dsl_path, Unavailable)
    found = checks_packages.check(facts, "flashinfer")
    unknown = [f for f in found if f.code == "fact-unavailable"]
    assert len(unknown) == 1 and "dsl_path" in unknown[0].title
    assert unknown[0].severity == "warning"
