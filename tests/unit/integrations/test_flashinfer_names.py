"""The list of FlashInfer names jitguard uses stays in step with the code that uses them, and is checked against
a FlashInfer tree by release."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from jitguard.facts.source_names import FOUND, MODULE_MISSING, NAME_NOT_FOUND
from jitguard.integrations.flashinfer_names import NAMES, FlashInferName, check, expected


@pytest.mark.parametrize("name", NAMES, ids=lambda n: f"{n.module}:{n.target}")
def test_the_module_it_names_as_user_names_it(name: FlashInferName) -> None:
    spec = importlib.util.find_spec(name.by)
    assert spec is not None and spec.origin is not None
    source = Path(spec.origin).read_text()
    assert name.module.split(".")[-1] in source
    for target in name.target.split(", "):
        assert target.split(".")[-1] in source, f"{name.by} does not use {target}"


def test_expected_follows_the_releases() -> None:
    era = next(n for n in NAMES if n.target == "get_gdn_prefill_module")
    assert (expected(era, "0.6.6"), expected(era, "0.6.13"), expected(era, "0.6.14")) == (True, True, False)
    assert expected(era, "not-a-version") is None


def test_a_name_expected_and_missing_has_drifted(tmp_path: Path) -> None:
    core = tmp_path / "flashinfer" / "jit" / "core.py"
    core.parent.mkdir(parents=True)
    (tmp_path / "flashinfer" / "__init__.py").write_text("")
    (core.parent / "__init__.py").write_text("")
    core.write_text("class JitSpec:\n    def build(self): ...\n")  # build_and_load renamed away
    names = [n for n in NAMES if n.module == "flashinfer.jit.core"]
    found = {c.name.target: c for c in check(str(tmp_path), "0.6.6", names)}
    spec = found["JitSpec.build_and_load, JitSpec.build"]
    assert (spec.state, spec.expected, spec.drifted) == (NAME_NOT_FOUND, True, True)
    nvcc = found["JitSpecNvcc"]
    assert (nvcc.state, nvcc.expected, nvcc.drifted) == (NAME_NOT_FOUND, False, False)
    assert check(str(tmp_path / "nowhere"), "0.6.6", names)[0].state == MODULE_MISSING
    core.write_text("class JitSpec:\n    def build(self): ...\n    def build_and_load(self): ...\n")
    assert check(str(tmp_path), "0.6.6", names)[0].state == FOUND
