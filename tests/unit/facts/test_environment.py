"""Environment facts: which variables are kept, secrets redacted, and the two traps, checked against what the
installed FlashInfer itself does with the same values."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from jitguard.facts import environment


def test_relevant_variables_are_kept_and_others_dropped() -> None:
    env = {
        "CUDA_HOME": "/usr/local/cuda",
        "FLASHINFER_EXTRA_LDFLAGS": "-L/opt/stubs",
        "FLA_FLASH_QLA": "0",
        "JITGUARD_MEMORY_BUDGET": "32G",
        "VLLM_USE_FLASHINFER_SAMPLER": "1",
        "VLLM_HOST_IP": "10.0.0.1",
        "EDITOR": "vi",
        "MAX_JOBS": "4",
    }
    facts = environment.probe(env)
    assert facts.as_dict() == {
        "CUDA_HOME": "/usr/local/cuda",
        "FLASHINFER_EXTRA_LDFLAGS": "-L/opt/stubs",
        "FLA_FLASH_QLA": "0",
        "JITGUARD_MEMORY_BUDGET": "32G",
        "MAX_JOBS": "4",
        "VLLM_USE_FLASHINFER_SAMPLER": "1",
    }
    assert [k for k, _ in facts.variables] == sorted(facts.as_dict())
    assert facts.get("CUDA_HOME") == "/usr/local/cuda"
    assert facts.get("EDITOR") is None


@pytest.mark.parametrize(
    "name",
    ["FLASHINFER_API_TOKEN", "JITGUARD_SECRET", "VLLM_FLASHINFER_KEY", "FLA_PASSWORD", "CUTE_DSL_CREDENTIAL"],
)
def test_secrets_are_redacted(name: str) -> None:
    facts = environment.probe({name: "hunter2"})
    assert facts.get(name) == "<redacted>"


@pytest.mark.parametrize(
    ("raw", "value", "valid"),
    [
        (None, None, True),
        ("4", 4, True),
        ("16", 16, True),
        ("abc", None, False),
        (" 4", None, False),
        ("4.0", None, False),
        ("-1", None, False),
        ("", None, False),
        ("0", 0, False),  # passed to ninja as -j 0: no limit at all
    ],
)
def test_max_jobs(raw: str | None, value: int | None, valid: bool) -> None:
    facts = environment.probe({} if raw is None else {"MAX_JOBS": raw})
    assert (facts.max_jobs, facts.max_jobs_value, facts.max_jobs_valid) == (raw, value, valid)


@pytest.mark.parametrize(
    ("env", "trap"),
    [
        ({}, False),
        ({"FLASHINFER_JIT_VERBOSE": "1"}, True),
        ({"FLASHINFER_JIT_VERBOSE": "1", "FLASHINFER_JIT_DEBUG": "0"}, False),
        ({"FLASHINFER_JIT_VERBOSE": "1", "FLASHINFER_JIT_DEBUG": "1"}, False),  # asked for debug on purpose
        ({"FLASHINFER_JIT_VERBOSE": "true"}, False),
    ],
)
def test_jit_verbose_debug_trap(env: dict[str, str], trap: bool) -> None:
    assert environment.probe(env).jit_debug_trap is trap


CHECK_WITH_FLASHINFER = r"""
import json, os, sys
from flashinfer.jit import cpp_ext
out = []
for raw in sys.argv[1:]:
    os.environ["MAX_JOBS"] = raw
    out.append(cpp_ext._get_num_workers())
print(json.dumps(out))
"""


def test_max_jobs_agrees_with_flashinfers_own_parser(tmp_path: Path) -> None:
    """FlashInfer's private helper is the ground truth for which MAX_JOBS values reach ninja."""
    try:
        import importlib.metadata

        importlib.metadata.version("flashinfer-python")
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("flashinfer-python is not installed")
    values = ["4", "abc", " 4", "4.0", "-1", "", "0", "12"]
    env = {**os.environ, "FLASHINFER_CUDA_ARCH_LIST": "9.0a", "FLASHINFER_WORKSPACE_BASE": str(tmp_path)}
    proc = subprocess.run(
        [sys.executable, "-c", CHECK_WITH_FLASHINFER, *values],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    if proc.returncode != 0 and "_get_num_workers" in proc.stderr:
        pytest.skip("this FlashInfer has no cpp_ext._get_num_workers")
    assert proc.returncode == 0, proc.stderr[-2000:]
    theirs = json.loads(proc.stdout.splitlines()[-1])
    ours = [environment.probe({"MAX_JOBS": v}).max_jobs_value for v in values]
    assert ours == theirs


def test_max_jobs_with_non_ascii_digits_is_invalid_not_a_crash() -> None:
    from jitguard.facts import environment

    facts = environment.probe({"MAX_JOBS": "²"})
    assert facts.max_jobs_valid is False and facts.max_jobs_value is None
