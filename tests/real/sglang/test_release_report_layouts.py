"""The release report (``benchmarks/release_report.py``) names the layout the plugin hooks in each real
SGLang release, read from its sources: 0.5.17 keeps the 0.5.11-0.5.16 function name and adds its ``_BACKENDS``
dict, so a report that read names only called 0.5.15 and 0.5.16 "process-wide table"."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import pytest

import benchmark_modules

if TYPE_CHECKING:
    from conftest import SglangRelease

pytestmark = pytest.mark.slow

EXPECTED = {"0.5.15": "process-wide", "0.5.17": "process-wide table", "0.5.23": "per-runner"}


@pytest.mark.parametrize("version", sorted(EXPECTED))
def test_the_report_names_the_layout_each_release_has(
    version: str,
    releases: Callable[[str], SglangRelease],
) -> None:
    report = benchmark_modules.load("release_report")
    release = releases(version)

    read = report.read_sglang(report.Tree("sglang", version, release.src, "tree"))

    assert read["layout"] == EXPECTED[version]
    states = {h["layout"]: h["state"] for h in read["hooks"]}
    assert states[EXPECTED[version]] == "found"
    if version != "0.5.17":  # the dict is 0.5.17's alone
        assert states["process-wide table"] == "name not found"
    assert read["guarded"] is True
