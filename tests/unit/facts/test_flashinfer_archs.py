"""FlashInfer's target rules per release (read from its compilation_context.py of 0.6.6, 0.6.7, 0.6.8-0.7.0,
0.7.1-0.7.4) and the flashinfer-jit-cache wheel named for a GPU."""

from __future__ import annotations

import pytest

from jitguard.facts.cuda_archs import Target
from jitguard.facts.flashinfer_archs import KIND_FUSED_MOE, jit_cache_wheel, plan, requested


@pytest.mark.parametrize(
    ("version", "cuda", "expected"),
    [
        ("0.6.6", (12, 8), "12.1a"),  # verbatim era: major >= 9 gets 'a'
        ("0.6.7", (12, 9), "12.0f"),  # 0.6.7 folds every 12.x into 120f
        ("0.6.12", (12, 9), "12.1a"),
        ("0.7.0", (12, 8), "SM 12.x requires CUDA >= 12.9"),
        ("0.7.4", (12, 8), "SM 12.1+ requires CUDA >= 12.9"),
    ],
)
def test_a_gpu_of_capability_12_1_gets_each_releases_target(
    version: str, cuda: tuple[int, int], expected: str
) -> None:
    got = plan(version, None, [(12, 1)], cuda)
    assert got is not None
    assert (got.refusals[0] if got.refusals else got.targets[0].spelling) == expected
    assert not got.refusals or got.targets == ()  # FlashInfer swallows the refusal and keeps no target


def test_0_7_1_settles_for_120a_on_cuda_12_8_where_0_7_0_refuses() -> None:
    assert plan("0.7.4", None, [(12, 0)], (12, 8)).targets == (Target(12, 0, "a"),)  # type: ignore[union-attr]
    assert plan("0.7.0", None, [(12, 0)], (12, 8)).refusals == ("SM 12.x requires CUDA >= 12.9",)  # type: ignore[union-attr]


def test_a_suffixed_list_entry_is_taken_as_written_and_a_plain_one_normalised() -> None:
    got = plan("0.6.18", "8.0 10.0 12.0f", (), (12, 9))
    assert got is not None and [t.spelling for t in got.targets] == ["8.0", "10.0a", "12.0f"]


def test_fused_moe_asks_only_for_its_family() -> None:
    got = plan("0.6.18", "9.0a 10.0a 12.0f", (), (13, 0))
    assert got is not None
    assert requested(got, KIND_FUSED_MOE, [(12, 0)]) == (Target(12, 0, "f"),)
    assert requested(got, KIND_FUSED_MOE, [(9, 0)]) == (Target(9, 0, "a"),)


def test_jit_cache_wheels_are_named_per_release_cuda_and_target() -> None:
    new = jit_cache_wheel("0.7.4", (12, 0), (12, 9))
    assert new is not None and new.packages == (
        "flashinfer-jit-cache==0.7.4+cu129",
        "flashinfer-jit-cache-sm120f==0.7.4+cu129",
    )
    assert new.index_url == "https://flashinfer.ai/whl/cu129"
    old = jit_cache_wheel("0.6.12", (12, 0), (12, 8))
    assert (
        old is not None
        and old.packages == ("flashinfer-jit-cache==0.6.12+cu128",)
        and old.target.sm == "sm_120a"
    )
    assert jit_cache_wheel("0.7.4", (7, 0), (13, 0)) is None  # no wheel is built below sm75
    assert jit_cache_wheel("0.7.4", (12, 0), (12, 8)) is None  # 0.6.18+ publish cu129 and newer only
