"""Every bad input to the op gets a GdnInputError (a UsageError and a ValueError) saying what is wrong."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch

from jitguard.errors import UsageError
from jitguard.gdn import GdnInputError, chunk_gated_delta_rule
from jitguard.gdn.shapes import make_inputs
from jitguard.gdn.validate import check_cu_seqlens_values

T, HQ, HV, D = 12, 2, 4, 16


def good() -> dict[str, Any]:
    x = make_inputs((5, 7), HQ, HQ, HV, D, dtype=torch.float32, with_state=True)
    return {
        "q": x.q,
        "k": x.k,
        "v": x.v,
        "g": x.g,
        "beta": x.beta,
        "cu_seqlens": x.cu_seqlens,
        "initial_state": x.initial_state,
    }


def call(args: dict[str, Any], **extra: Any) -> Any:
    a = dict(args)
    q, k, v, g, beta = (a.pop(n) for n in ("q", "k", "v", "g", "beta"))
    return chunk_gated_delta_rule(q, k, v, g, beta, **a, **extra)


def test_good_inputs_pass() -> None:
    o, _ = call(good())
    assert o.shape == (T, HV, D)


Edit = Callable[[dict[str, Any]], None]
BAD: list[tuple[str, Edit, str]] = [
    ("q-not-tensor", lambda a: a.update(q=a["q"].tolist()), "q must be a torch.Tensor"),
    ("q-batched-4d", lambda a: a.update(q=a["q"][None]), "q must be 3-D"),
    ("k-4d", lambda a: a.update(k=a["k"][None]), "k must be 3-D"),
    ("token-mismatch", lambda a: a.update(v=a["v"][:-1]), "same number of tokens"),
    ("head-size-mismatch", lambda a: a.update(v=a["v"][..., :8]), "same head size"),
    ("bad-head-ratio", lambda a: a.update(v=torch.zeros(T, 3, D)), "head counts q/k/v = 2/2/3"),
    ("q-k-heads-differ-not-gqa", lambda a: a.update(k=torch.zeros(T, 1, D)), "head counts q/k/v = 2/1/4"),
    ("integer-q", lambda a: a.update(q=a["q"].to(torch.int32)), "q must be float16, bfloat16"),
    ("mixed-dtypes", lambda a: a.update(k=a["k"].half()), "share one dtype"),
    ("g-wrong-heads", lambda a: a.update(g=a["g"][:, :2]), "g must have shape [T, max(Hq, Hv)] = [12, 4]"),
    ("g-3d", lambda a: a.update(g=a["g"][..., None]), "g must be 2-D"),
    ("beta-wrong-tokens", lambda a: a.update(beta=a["beta"][:5]), "beta must have shape"),
    ("beta-integer", lambda a: a.update(beta=a["beta"].long()), "beta must be a floating-point tensor"),
    ("g-on-meta", lambda a: a.update(g=a["g"].to("meta")), "g must be on the device of q"),
    ("k-on-meta", lambda a: a.update(k=a["k"].to("meta")), "must be on one device"),
    ("cu-float", lambda a: a.update(cu_seqlens=a["cu_seqlens"].float()), "cu_seqlens must be int32 or int64"),
    ("cu-list", lambda a: a.update(cu_seqlens=[0, 5, 12]), "cu_seqlens must be a torch.Tensor"),
    ("cu-2d", lambda a: a.update(cu_seqlens=a["cu_seqlens"][None]), "cu_seqlens must be 1-D"),
    ("cu-too-short", lambda a: a.update(cu_seqlens=torch.tensor([0])), "at least 2 entries"),
    ("cu-not-from-0", lambda a: a.update(cu_seqlens=torch.tensor([1, 5, 12])), "must start at 0"),
    ("cu-decreasing", lambda a: a.update(cu_seqlens=torch.tensor([0, 7, 5, 12])), "non-decreasing"),
    ("cu-not-ending-at-T", lambda a: a.update(cu_seqlens=torch.tensor([0, 5, 11])), "must end at T = 12"),
    ("cu-on-other-device", lambda a: a.update(cu_seqlens=a["cu_seqlens"].to("meta")), "on the CPU or on the"),
    (
        "state-wrong-n",
        lambda a: a.update(initial_state=a["initial_state"][:1]),
        "initial_state must have shape",
    ),
    (
        "state-kv-layout-hint",
        lambda a: a.update(initial_state=torch.zeros(2, 4, 16, 8)),
        ".transpose(-1, -2)",
    ),
    (
        "state-bf16",
        lambda a: a.update(initial_state=a["initial_state"].bfloat16()),
        "initial_state must be float32",
    ),
    ("state-3d", lambda a: a.update(initial_state=a["initial_state"][0]), "initial_state must be 4-D"),
    ("scale-zero", lambda a: a.update(scale=0.0), "scale must be a finite non-zero number"),
    ("scale-nan", lambda a: a.update(scale=float("nan")), "scale must be a finite non-zero number"),
    ("scale-string", lambda a: a.update(scale="0.1"), "scale must be a finite non-zero number"),
    ("scale-huge-int", lambda a: a.update(scale=10**400), "scale must be a finite non-zero number"),
    ("unknown-backend", lambda a: a.update(backend="cuda"), "backend must be one of auto, flashinfer"),
]


@pytest.mark.parametrize(("edit", "message"), [pytest.param(e, m, id=i) for i, e, m in BAD])
def test_bad_input_is_refused_with_a_clear_error(edit: Edit, message: str) -> None:
    args = good()
    edit(args)
    with pytest.raises(GdnInputError) as caught:
        call(args)
    assert message in str(caught.value)


def test_input_errors_are_usage_errors_and_value_errors() -> None:
    err = GdnInputError("x")
    assert isinstance(err, UsageError) and isinstance(err, ValueError) and err.exit_code == 2


def test_cu_seqlens_values_can_be_checked_explicitly() -> None:
    check_cu_seqlens_values(torch.tensor([0, 0, 3, 3]), 3)  # empty sequences are allowed
    with pytest.raises(GdnInputError, match="must end at T = 4"):
        check_cu_seqlens_values(torch.tensor([0, 3]), 4)


def test_gqa_and_gva_and_mha_layouts_are_accepted() -> None:
    for hq, hk, hv in ((4, 2, 2), (2, 2, 4), (3, 3, 3)):
        x = make_inputs((3,), hq, hk, hv, 8, dtype=torch.float32)
        o, _ = chunk_gated_delta_rule(x.q, x.k, x.v, x.g, x.beta, cu_seqlens=x.cu_seqlens)
        assert o.shape == (3, max(hq, hv), 8)


def test_the_dispatch_key_comes_from_validation() -> None:
    from jitguard.gdn.validate import check_call

    a = good()
    key = check_call(a["q"], a["k"], a["v"], a["g"], a["beta"], a["cu_seqlens"], None, a["initial_state"])
    assert key == ("cpu", torch.float32, D, HQ, HQ, HV)

    # the thorough path (numpy-like float scale) gives the same key
    class Scale(float):
        pass

    assert check_call(a["q"], a["k"], a["v"], a["g"], a["beta"], a["cu_seqlens"], Scale(0.5), None) == key
