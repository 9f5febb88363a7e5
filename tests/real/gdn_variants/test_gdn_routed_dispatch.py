"""Never a wrong kernel: FlashInfer's REAL dispatch unit (0.6.6 installed, 0.6.12 from tests/data), routed by
jitguard for a plan, compiled for real (g++ as host C++; the GPU kernels it dispatches to are the only part
replaced: a recording definition of the instance template, FlashInfer's own declaration) and run for every
combination of dtype and flags FlashInfer's launcher can pass. A combination in the plan reaches exactly that
instance; every other one throws a jitguard error instead of calling anything.
"""

from __future__ import annotations

import importlib.util
import itertools
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from jitguard.gdn_variants.partial_module import dispatch_source
from jitguard.gdn_variants.variant_plan import Family, VariantPlan, family_for, parse_variant, plan_for

DATA = Path(__file__).parents[2] / "data" / "flashinfer-0.6.12"
CUDA_INCLUDE = next(
    (
        p
        for p in (Path("/usr/local/cuda/include"), Path("/usr/local/cuda-13.0/include"))
        if (p / "cuda_fp16.h").exists()
    ),
    None,
)
pytestmark = pytest.mark.skipif(
    shutil.which("g++") is None or CUDA_INCLUDE is None, reason="needs g++ and the CUDA headers (cuda_fp16.h)"
)
DECLARATION = re.compile(
    r"template\s*<[^>]*>\s*void\s+launch_delta_rule_prefill_kernel_gbai\s*\([^)]*\)", re.DOTALL
)


def _flashinfer_066() -> tuple[str, str]:
    spec = importlib.util.find_spec("flashinfer")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("flashinfer-python is not installed")
    data = Path(next(iter(spec.submodule_search_locations))) / "data"
    header = (data / "include/flashinfer/flat/prefill/prefill_kernel_delta_rule_sm90.cuh").read_text()
    return (data / "csrc/prefill_kernel_delta_rule_sm90.cu").read_text(), header


SOURCES = {
    "0.6.6": _flashinfer_066,
    "0.6.12": lambda: (
        (DATA / "prefill_kernel_delta_rule_sm90.cu").read_text(),
        (DATA / "gbai_declaration.hpp").read_text(),
    ),
}


def _stand_in_header(header: str) -> str:
    """The instance template as FlashInfer declares it, defined to print which instance was called."""
    found = DECLARATION.search(header)
    assert found is not None
    flags = re.findall(r"bool (\w+)", found.group(0).split(">")[0])
    shown = " << ".join(f'"{letter}" << int({flag})' for letter, flag in zip("gbaic", flags, strict=False))
    return f"""
#include <cstdint>
#include <iostream>
#include <type_traits>
#include <cuda_runtime_api.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
namespace cutlass {{ namespace arch {{ struct Sm90 {{}}; }} }}
namespace cute {{}}
namespace flat {{
{found.group(0)} {{
  std::cout << "called " << (std::is_same<TO, half>::value ? "half" : "bf16") << "_" << {shown} << std::endl;
}}
}}  // namespace flat
"""


def _main(family: Family) -> str:
    extra_args = ", nullptr, nullptr, 0" if family.has_checkpointing else ""
    calls = []
    for dtype, ctype in (("half", "half"), ("bf16", "nv_bfloat16")):
        for values in itertools.product((0, 1), repeat=len(family.flags)):
            gva, beta, alpha, state = values[:4]
            checkpoint = ", nullptr, nullptr, 64" if family.has_checkpointing and values[4] else extra_args
            name = dtype + "_" + "".join(f"{c}{v}" for c, v in zip(family.letters, values, strict=True))
            calls.append(
                f'  try {{ std::cout << "{name} "; flat::launch_delta_rule_prefill_kernel<cutlass::arch::Sm90, '
                f"{ctype}, {ctype}, float>(nullptr, ({ctype}*)buf, f, ({ctype}*)buf, ({ctype}*)buf, ({ctype}*)buf, "
                f"{'f' if state else 'nullptr'}, {'f' if alpha else 'nullptr'}, {'f' if beta else 'nullptr'}, cu, "
                f"ws, 1, 16, 16, {32 if gva else 16}, {32 if gva else 16}, 128, 64, 0.1f, 132{checkpoint}); }}"
                ' catch (const std::exception& e) { std::cout << "threw " << e.what() << std::endl; }'
            )
    body = "\n".join(calls)
    return f"""
int main() {{
  static float f[16];
  static unsigned char buf[64], ws[64];
  static int64_t cu[2] = {{0, 64}};
{body}
  return 0;
}}
"""


def _run(version: str, plan: VariantPlan, tmp_path: Path) -> dict[str, str]:
    dispatch, header = SOURCES[version]()
    routed = dispatch_source(dispatch, plan)
    routed = routed.replace(
        '#include "flashinfer/flat/prefill/prefill_kernel_delta_rule_sm90.cuh"', _stand_in_header(header)
    )
    routed = routed.replace('#include "flat_prefill_kernel_delta_rule_sm90_extern.inc"', "")
    source = tmp_path / "dispatch.cpp"
    source.write_text(routed + _main(plan.family))
    program = tmp_path / "dispatch"
    compiled = subprocess.run(
        ["g++", "-std=c++20", "-O0", "-I", str(CUDA_INCLUDE), str(source), "-o", str(program)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert compiled.returncode == 0, compiled.stderr[-4000:]
    ran = subprocess.run([str(program)], capture_output=True, text=True, timeout=60)
    assert ran.returncode == 0, ran.stderr
    outcome = {}
    for line in ran.stdout.splitlines():
        name, _, rest = line.partition(" ")
        outcome[name] = rest
    return outcome


@pytest.mark.parametrize(
    ("version", "names"),
    [
        ("0.6.6", ["bf16_g1b1a1i1"]),
        ("0.6.6", ["bf16_g1b1a1i0", "half_g0b1a1i1", "bf16_g1b1a1i1"]),
        ("0.6.12", ["bf16_g1b1a1i1c0", "bf16_g1b1a1i1c1"]),
    ],
)
def test_a_planned_instance_is_called_exactly_and_every_other_combination_throws(
    version: str, names: list[str], tmp_path: Path
) -> None:
    family = family_for(version)
    assert family is not None
    plan = plan_for(version, [parse_variant(n, family) for n in names])
    outcome = _run(version, plan, tmp_path)
    assert len(outcome) == family.instance_count
    for name, result in outcome.items():
        if name in names:
            assert result == f"called {name}", (name, result)
        else:
            assert result.startswith(f"threw jitguard: {plan.module} holds only"), (name, result)
            assert f"this call needs {name}." in result, (name, result)
