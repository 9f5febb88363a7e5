"""The GDN router: every call runs on a module that holds its instance, built once on first need; anything it
cannot do safely goes to FlashInfer's full module; verdicts about the machine propagate.

The kernels cannot run on this GPU-less host, so a module here is a Python function that records which module
served which call; the arguments are FlashInfer's, in FlashInfer's order, with the fields the launcher reads
(q's dtype, the head counts, which of alpha/beta/initial state are given, checkpointing).
"""

from __future__ import annotations

import logging
from types import SimpleNamespace
from typing import Any

import pytest

from jitguard.errors import BuildFailed
from jitguard.findings.model import Finding
from jitguard.gdn_variants import module_router
from jitguard.gdn_variants.module_router import GdnRouter
from jitguard.gdn_variants.variant_plan import GdnVariant, VariantPlan, family_for, parse_variant, plan_for

OLD = family_for("0.6.6")
NEW = family_for("0.6.12")
assert OLD is not None and NEW is not None


class Tensor(SimpleNamespace):
    pass


def finding(code: str) -> Finding:
    """A blocking finding with ``code``, as a classified build failure carries it."""
    return Finding(code, "error", f"title of {code}", f"cause of {code}", backend="flashinfer")


def call_args(
    dtype: str = "torch.bfloat16",
    hq: int = 16,
    hv: int = 32,
    *,
    state: bool = True,
    alpha: bool = True,
    beta: bool = True,
    checkpoint_every: int | None = None,
) -> tuple[Any, ...]:
    q = Tensor(dtype=dtype, shape=(64, hq, 128))
    v = Tensor(dtype=dtype, shape=(64, hv, 128))
    args: list[Any] = ["output", "output_state", q, q, v, "cu_seqlens"]
    args += [Tensor() if state else None, Tensor() if alpha else None, Tensor() if beta else None, 0.0, "ws"]
    if checkpoint_every is not None:
        args += [None, None, checkpoint_every]
    return tuple(args)


class Workspace:
    """What the router's build stage would do, recorded: plans built, the full module asked for."""

    def __init__(self, version: str = "0.6.6") -> None:
        self.version = version
        self.built: list[str] = []
        self.full_built = 0
        self.calls: list[tuple[str, tuple[Any, ...]]] = []
        self.full_exists = False
        self.prebuilt: list[VariantPlan] = []
        self.fail_with: BaseException | None = None

    def kernel(self, name: str, variants: tuple[GdnVariant, ...] | None) -> Any:
        def run(*args: Any, **kwargs: Any) -> str:
            self.calls.append((name, args))
            return name

        run.variants = variants  # type: ignore[attr-defined]
        return run

    def build(self, plan: VariantPlan) -> Any:
        if self.fail_with is not None:
            raise self.fail_with
        self.built.append(plan.module)
        return self.kernel(plan.module, plan.variants)

    def full(self) -> Any:
        self.full_built += 1
        return SimpleNamespace(gdn_prefill=self.kernel("full", None))

    def router(self) -> GdnRouter:
        family = family_for(self.version)
        assert family is not None
        return GdnRouter(
            self.version,
            family,
            self.full,
            build=self.build,
            full_exists=lambda: self.full_exists,
            find_built=lambda v: next((p for p in self.prebuilt if v in p.variants), None),
        )


@pytest.fixture(autouse=True)
def _no_expectations(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(module_router, "_expected", set())
    monkeypatch.setattr(
        module_router, "_library", lambda plan: module_router.Path("/nonexistent") / plan.module
    )


def test_each_call_runs_on_a_module_that_holds_its_instance_built_once() -> None:
    ws = Workspace()
    routed = ws.router()
    assert routed.gdn_prefill(*call_args()) == "gdn_prefill_sm90_only_bf16_g1b1a1i1"
    routed.gdn_prefill(*call_args(hq=2, hv=4))  # TP8 heads: the same instance, the same module
    assert ws.built == ["gdn_prefill_sm90_only_bf16_g1b1a1i1"]
    # A later call needing another instance (no initial state) gets it built then, once, on its own.
    assert routed.gdn_prefill(*call_args(state=False)) == "gdn_prefill_sm90_only_bf16_g1b1a1i0"
    routed.gdn_prefill(*call_args(state=False))
    routed.gdn_prefill(*call_args())
    assert ws.built == ["gdn_prefill_sm90_only_bf16_g1b1a1i1", "gdn_prefill_sm90_only_bf16_g1b1a1i0"]
    assert ws.full_built == 0
    for name, args in ws.calls:  # never a wrong kernel
        assert name.endswith("i1" if args[6] is not None else "i0")
    assert routed.modules() == {
        "gdn_prefill_sm90_only_bf16_g1b1a1i1": (parse_variant("bf16_g1b1a1i1", OLD),),
        "gdn_prefill_sm90_only_bf16_g1b1a1i0": (parse_variant("bf16_g1b1a1i0", OLD),),
    }


def test_the_checkpoint_flag_of_a_call_picks_the_instance_from_flashinfer_068() -> None:
    ws = Workspace("0.6.12")
    routed = ws.router()
    routed.gdn_prefill(*call_args(checkpoint_every=0))
    routed.gdn_prefill(*call_args(checkpoint_every=128))
    assert ws.built == ["gdn_prefill_sm90_only_bf16_g1b1a1i1c0", "gdn_prefill_sm90_only_bf16_g1b1a1i1c1"]


def test_the_expected_instances_are_built_together_at_the_first_call_of_any() -> None:
    ws = Workspace()
    module_router.expect(
        [parse_variant("bf16_g1b1a1i1", OLD), parse_variant("bf16_g1b1a1i0", OLD)], why="test"
    )
    routed = ws.router()
    routed.gdn_prefill(*call_args(state=False))
    routed.gdn_prefill(*call_args())
    assert ws.built == ["gdn_prefill_sm90_only_bf16_g1b1a1i0_bf16_g1b1a1i1"]
    routed.gdn_prefill(*call_args(dtype="torch.float16"))  # not expected: a module of its own
    assert ws.built[-1] == "gdn_prefill_sm90_only_half_g1b1a1i1"


def test_a_module_prebuilt_for_several_instances_serves_each_of_them() -> None:
    ws = Workspace()
    ws.prebuilt = [plan_for("0.6.6", [parse_variant(n, OLD) for n in ("bf16_g1b1a1i1", "half_g1b1a1i1")])]
    routed = ws.router()
    assert routed.gdn_prefill(*call_args()) == ws.prebuilt[0].module
    assert routed.gdn_prefill(*call_args(dtype="torch.float16")) == ws.prebuilt[0].module
    assert ws.built == [ws.prebuilt[0].module]  # loaded once (build_spec finds it up to date)


def test_an_existing_full_module_serves_every_call_and_nothing_is_compiled() -> None:
    ws = Workspace()
    ws.full_exists = True
    routed = ws.router()
    assert routed.gdn_prefill(*call_args()) == "full"
    assert routed.gdn_prefill(*call_args(state=False)) == "full"
    assert ws.built == [] and ws.full_built == 1


@pytest.mark.parametrize(
    "args",
    [call_args(dtype="torch.float32"), call_args()[:-1], (*call_args(), "extra")],
    ids=["dtype-without-instances", "fewer-arguments", "more-arguments"],
)
def test_a_call_the_router_cannot_read_goes_to_flashinfers_full_module(args: tuple[Any, ...]) -> None:
    ws = Workspace()
    assert ws.router().gdn_prefill(*args) == "full"
    assert ws.built == []


def test_keyword_arguments_go_to_the_full_module() -> None:
    ws = Workspace()
    assert ws.router().gdn_prefill(*call_args()[:-1], workspace_buffer="ws") == "full"


def test_a_fault_of_jitguards_takes_the_full_module_with_one_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    ws = Workspace()
    ws.fail_with = ValueError("prefill_kernel_delta_rule_sm90.cu: expected one '#define LAUNCH(...)'")
    routed = ws.router()
    with caplog.at_level(logging.WARNING, logger="jitguard"):
        for _ in range(3):
            assert routed.gdn_prefill(*call_args()) == "full"
        assert routed.gdn_prefill(*call_args(state=False)) == "full"
    faults = [r.getMessage() for r in caplog.records if "jitguard-fault" in r.getMessage()]
    assert len(faults) == 1 and "full module is used instead" in faults[0], faults
    assert ws.full_built == 1


def test_an_unnamed_compile_failure_of_the_partial_module_takes_the_full_module(
    caplog: pytest.LogCaptureFixture,
) -> None:
    ws = Workspace()
    ws.fail_with = BuildFailed(
        "gdn_prefill_sm90_only_bf16_g1b1a1i1", [finding("build-failed")], "/logs/x.log"
    )
    with caplog.at_level(logging.WARNING, logger="jitguard"):
        assert ws.router().gdn_prefill(*call_args()) == "full"
    assert any("using FlashInfer's full module instead" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("code", ["link-missing-libcuda", "build-oom-killed", "lock-timeout"])
def test_a_verdict_about_the_machine_propagates_and_the_full_module_is_not_built(code: str) -> None:
    ws = Workspace()
    ws.fail_with = BuildFailed("gdn_prefill_sm90_only_bf16_g1b1a1i1", [finding(code)], None)
    routed = ws.router()
    with pytest.raises(BuildFailed) as raised:
        routed.gdn_prefill(*call_args())
    assert raised.value.findings[0].code == code
    assert ws.full_built == 0
    ws.fail_with = None  # the cause fixed (e.g. a rank took over): the next call builds
    assert routed.gdn_prefill(*call_args()) == "gdn_prefill_sm90_only_bf16_g1b1a1i1"


def test_prepare_builds_what_a_kind_of_call_needs_before_it_runs() -> None:
    ws = Workspace()
    routed = ws.router()
    routed.prepare(parse_variant("bf16_g1b1a1i1", OLD))
    assert ws.built == ["gdn_prefill_sm90_only_bf16_g1b1a1i1"] and ws.calls == []
    routed.gdn_prefill(*call_args())
    assert ws.built == ["gdn_prefill_sm90_only_bf16_g1b1a1i1"]


def test_expect_logs_once_per_new_instance(caplog: pytest.LogCaptureFixture) -> None:
    variant = parse_variant("bf16_g1b1a1i1", OLD)
    with caplog.at_level(logging.INFO, logger="jitguard"):
        module_router.expect([variant], why="from the model config")
        module_router.expect([variant], why="from the model config")
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1 and "bf16_g1b1a1i1" in lines[0] and "JITGUARD_GDN_VARIANTS=all" in lines[0]
    assert module_router.expected() == {variant}
