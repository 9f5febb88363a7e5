"""jitguard's copy of FlashInfer's GDN dispatch unit: LAUNCH routed through a wrapper that references only the
planned instances, checked on the real sources of 0.6.6 (installed) and 0.6.12 (tests/data)."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

from jitguard.gdn_variants.partial_module import ROUTED, VariantSourceError, dispatch_source
from jitguard.gdn_variants.variant_plan import INSTANCE_SYMBOL, family_for, parse_variant, plan_for

DATA = Path(__file__).parents[2] / "data"


def _source_066() -> str:
    spec = importlib.util.find_spec("flashinfer")  # finds the package without importing it
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("flashinfer-python is not installed")
    path = Path(next(iter(spec.submodule_search_locations))) / "data/csrc/prefill_kernel_delta_rule_sm90.cu"
    if not path.is_file():
        pytest.skip(f"{path} is missing")
    return path.read_text()


SOURCES = {
    "0.6.6": _source_066,
    "0.6.12": lambda: (DATA / "flashinfer-0.6.12" / "prefill_kernel_delta_rule_sm90.cu").read_text(),
}
CALL = re.compile(rf"\b{INSTANCE_SYMBOL}\s*<")


def _plan(version: str, *names: str):  # type: ignore[no-untyped-def]
    family = family_for(version)
    assert family is not None
    return plan_for(version, [parse_variant(n, family) for n in names])


@pytest.mark.parametrize(
    ("version", "names"),
    [
        ("0.6.6", ["bf16_g1b1a1i1"]),
        ("0.6.6", ["bf16_g1b1a1i1", "half_g0b1a1i0"]),
        ("0.6.12", ["bf16_g1b1a1i1c0"]),
    ],
)
def test_launch_calls_the_wrapper_and_the_wrapper_is_the_only_caller_of_an_instance(
    version: str, names: list[str]
) -> None:
    original = SOURCES[version]()
    plan = _plan(version, *names)
    routed = dispatch_source(original, plan)
    macro = re.search(r"#define LAUNCH\(.*?[^\\]\n", routed, re.DOTALL)
    assert macro is not None and f"{ROUTED}<" in macro.group(0) and not CALL.search(macro.group(0))
    assert len(CALL.findall(routed)) == 1  # the one inside ``if constexpr`` of the wrapper
    assert "if constexpr (jitguard_instance_built<code, F0, F1, F2, F3" in routed
    # Everything else is FlashInfer's text, in order: the original lines are a subsequence of the copy.
    copy, at, changed = routed.splitlines(), 0, []
    for line in original.splitlines():
        if line in copy[at:]:
            at = copy.index(line, at) + 1
        else:
            changed.append(line)
    assert len(changed) == 1 and INSTANCE_SYMBOL in changed[0], changed


def test_the_wrapper_lists_exactly_the_planned_instances_as_template_conditions() -> None:
    plan = _plan("0.6.6", "bf16_g1b1a1i1", "half_g0b1a1i0")
    routed = dispatch_source(_source_066(), plan)
    built = re.search(r"constexpr bool jitguard_instance_built\(\) \{\s*return (.*?);", routed, re.DOTALL)
    assert built is not None
    terms = sorted(t.strip() for t in built.group(1).split("||"))
    assert terms == ["(D == 0 && !F0 && F1 && F2 && !F3)", "(D == 1 && F0 && F1 && F2 && F3)"]
    assert plan.module in routed  # the throw names the module
    twelve = dispatch_source(SOURCES["0.6.12"](), _plan("0.6.12", "bf16_g1b1a1i1c0"))
    assert "(D == 1 && F0 && F1 && F2 && F3 && !F4)" in twelve


def test_the_full_plan_leaves_flashinfers_source_alone() -> None:
    original = _source_066()
    assert dispatch_source(original, plan_for("0.6.6")) == original


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda s: s.replace("#define LAUNCH(", "#define LAUNCH_ALL("), "expected one '#define LAUNCH"),
        (lambda s: s + f"\nvoid f() {{ {INSTANCE_SYMBOL}<true>(); }}\n", "exactly once, inside LAUNCH"),
        (lambda s: s.replace("namespace flat {", "namespace other {"), "no 'namespace flat"),
    ],
)
def test_a_source_that_is_not_the_one_jitguard_knows_is_refused(edit, message: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(VariantSourceError, match=message):
        dispatch_source(edit(_source_066()), _plan("0.6.6", "bf16_g1b1a1i1"))


def test_a_launch_with_another_number_of_flags_is_refused() -> None:
    """0.6.12's dispatch unit (five flags) read as if it were 0.6.6's (four): refused, never half-routed."""
    with pytest.raises(VariantSourceError, match="LAUNCH takes 5 flags"):
        dispatch_source(SOURCES["0.6.12"](), _plan("0.6.6", "bf16_g1b1a1i1"))
