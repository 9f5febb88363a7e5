"""One ``--module NAME`` -> the failure-cache records it stands for."""

from __future__ import annotations

import pytest

from jitguard.gdn.backends import flashinfer
from jitguard.gdn_variants.variant_plan import FULL_MODULE, family_for, module_name, parse_variant
from jitguard.state.module_names import GDN_OP_FLASHINFER, Selection, select

RECORDED = [
    "gdn-prefill/flashinfer",
    "gdn-prefill/triton",
    "gdn_prefill_sm90",
    "gdn_prefill_sm90_only_bf16_g1b1a1i1",
    "sampling",
    "topk",
]


def matched(selection: Selection, modules: list[str]) -> list[str]:
    return sorted(m for m in modules if selection.holds(m))


GDN = ["gdn-prefill/flashinfer", "gdn_prefill_sm90", "gdn_prefill_sm90_only_bf16_g1b1a1i1"]


@pytest.mark.parametrize("name", GDN)
def test_each_name_of_flashinfer_gdn_prefill_stands_for_all_of_them(name: str) -> None:
    assert matched(select(name), RECORDED) == sorted(GDN)
    assert "go together" in (select(name).note() or "")


@pytest.mark.parametrize("name", ["gdn-prefill/triton", "sampling", "no-such-module"])
def test_any_other_name_stands_for_itself_alone(name: str) -> None:
    assert matched(select(name), RECORDED) == ([name] if name in RECORDED else [])
    assert select(name).note() is None


def test_the_group_holds_the_names_the_op_and_the_build_stage_really_make() -> None:
    family = family_for("0.6.6")
    assert family is not None
    partial = module_name((parse_variant("bf16_g1b1a1i1", family),))
    group = select(FULL_MODULE)
    assert flashinfer.MODULE == GDN_OP_FLASHINFER
    assert group.holds(GDN_OP_FLASHINFER) and group.holds(FULL_MODULE) and group.holds(partial)
