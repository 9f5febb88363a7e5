"""Package facts from installed metadata: the real site-packages, and real dist-info directories made in a
temporary site directory put on sys.path."""

from __future__ import annotations

import importlib
import importlib.metadata
import json
import subprocess
import sys
from pathlib import Path

import pytest

from fake_dists import make_dist
from jitguard.facts import packages


def test_real_installed_versions_match_importlib_metadata() -> None:
    facts = packages.probe()
    for name in packages.PACKAGES:
        try:
            expected: str | None = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            expected = None
        assert facts.version(name) == expected, name
        assert (name in facts.missing) == (expected is None)


def test_real_flashinfer_is_found_with_its_location() -> None:
    facts = packages.probe()
    info = facts.get("flashinfer-python")
    if info is None:
        pytest.skip("flashinfer-python is not installed")
    assert info.location is not None and (Path(info.location) / "flashinfer").is_dir()


def test_probe_imports_none_of_the_packages() -> None:
    code = (
        "import sys, json; from jitguard.facts import packages; packages.probe(); "
        "heavy = ('torch', 'flashinfer', 'triton', 'fla', 'vllm'); "
        "print(json.dumps(sorted(m for m in heavy if m in sys.modules)))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert json.loads(out.stdout) == []


def test_fake_dist_on_sys_path_is_seen(site: Path) -> None:
    make_dist(site, "triton", "3.6.0")
    make_dist(site, "vllm", "0.19.1")
    facts = packages.probe()
    assert facts.version("triton") == "3.6.0"
    assert facts.get("vllm") is not None and facts.get("vllm").location == str(site)  # type: ignore[union-attr]
    assert "triton" not in facts.missing


def test_dist_without_a_version_counts_as_missing(site: Path) -> None:
    make_dist(site, "flashinfer-cubin", None)
    facts = packages.probe(("flashinfer-cubin",))
    assert facts.missing == ("flashinfer-cubin",)


def test_names_are_normalised(site: Path) -> None:
    make_dist(site, "flashinfer_jit_cache", "0.6.6+cu129")
    facts = packages.probe(("flashinfer-jit-cache",))
    assert facts.version("Flashinfer_Jit.Cache") == "0.6.6+cu129"
    assert facts.get("flashinfer-jit-cache").local_tag == "cu129"  # type: ignore[union-attr]
    assert facts.get("flashinfer-jit-cache").public_version == "0.6.6"  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("version", "flavour", "cuda"),
    [
        ("2.13.0+cpu", "cpu", None),
        ("2.11.0+cu130", "cuda", "13.0"),
        ("2.9.1+cu128", "cuda", "12.8"),
        ("2.8.0+rocm6.3", "rocm", "6.3"),
        ("2.9.0", "unknown", None),
    ],
)
def test_torch_build_flavour_from_local_tag(version: str, flavour: str, cuda: str | None) -> None:
    assert packages.torch_build(version) == (flavour, cuda)


def test_torch_flavour_is_a_field(site: Path) -> None:
    make_dist(site, "torch", "2.11.0+cu130")
    facts = packages.probe(("torch",))
    assert (facts.torch_flavour, facts.torch_cuda) == ("cuda", "13.0")
    absent = packages.probe(("jitguard-no-such-dist",))
    assert absent.torch_flavour is None
