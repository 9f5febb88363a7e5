"""Secrets: redaction by value as well as by name, everywhere jitguard writes (JSON, text, cached link
verdicts, build logs). The tokens below have the real shapes of GitHub, Hugging Face, OpenAI and AWS keys."""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path

import pytest

from fault_makers import assert_no_traceback, base_env, jitguard, tiny_project
from jitguard.errors import BuildFailed
from jitguard.facts import environment

GITHUB = "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"
HUGGING_FACE = "hf_" + "QwErTyUiOpAsDfGhJkLzXcVbNm12345678"
OPENAI = "sk-proj-" + "Zx9Yw8Vu7Ts6Rq5Po4Nm3Lk2Ji1Hg0Fe"
AWS_ID = "AKIA" + "ABCDEFGHIJ234567"
AWS_SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYz8Qk3nV2Lm"
PAIR = "s3cr3t-Passw0rd"
TOKENS = (GITHUB, HUGGING_FACE, OPENAI, AWS_ID, AWS_SECRET, PAIR)

# Token-shaped values in variables whose names say nothing of secrets.
ENV = {
    "CUDA_HOME": f"/opt/cuda-{HUGGING_FACE}",
    "LD_LIBRARY_PATH": f"/usr/lib:/mnt/{GITHUB}/lib",
    "NVCC_APPEND_FLAGS": f"-DAPI_TOKEN={PAIR} -DAWS={AWS_ID} -Xcompiler {AWS_SECRET}",
    "FLASHINFER_EXTRA_LDFLAGS": f"-L/opt/{OPENAI}/lib -Wl,--build-id=none",
}


def _leaks(text: str) -> list[str]:
    return [token for token in TOKENS if token in text]


def test_environment_facts_redact_token_shaped_values_whatever_the_variable_name() -> None:
    facts = environment.probe(ENV)
    assert _leaks(repr(facts.variables)) == []
    assert facts.get("CUDA_HOME") == "/opt/cuda-<redacted>"


def test_doctor_json_and_text_never_show_a_token(tmp_path: Path) -> None:
    env = base_env(tmp_path / "cache", **ENV)
    for args in (["doctor", "--json"], ["doctor"]):
        proc = jitguard(args, env)
        assert_no_traceback(proc)
        assert _leaks(proc.stdout + proc.stderr) == [], args


@pytest.mark.skipif(shutil.which("c++") is None, reason="needs a host compiler for the trial link")
def test_a_cached_link_verdict_holds_no_token(tmp_path: Path) -> None:
    from jitguard.facts import libcuda, toolchain

    env = {**os.environ, **ENV}
    env.pop("CUDA_HOME")  # a real toolkit, so the trial link runs
    link = libcuda.probe(toolchain.probe(env), env, cache_dir=tmp_path / "cache")
    if link.error:
        pytest.skip(f"no trial link here: {link.error}")
    (record,) = (tmp_path / "cache" / "link").glob("*.json")
    assert _leaks(record.read_text()) == []
    assert _leaks(repr(link.cuda) + repr(link.cudart)) == []
    assert stat.S_IMODE(record.stat().st_mode) == 0o600


def test_a_build_log_is_0600_and_holds_no_token(tmp_path: Path) -> None:
    from jitguard.supervise.runner import BuildOptions, run_ninja

    printed = f"echo token={PAIR} {GITHUB} AWS_SECRET_ACCESS_KEY={AWS_SECRET} {HUGGING_FACE}; exit 3"
    manifest = tiny_project(tmp_path / "p", command=f"sh -c '{printed}'")
    options = BuildOptions(jobs=1, cache_dir=tmp_path / "cache", progress="none")
    with pytest.raises(BuildFailed) as info:
        run_ninja(manifest.parent, manifest, module="m", options=options)
    log = Path(str(info.value.log_path))
    assert "token=" in log.read_text()  # the line is kept, the value is not
    assert _leaks(log.read_text()) == []
    assert _leaks(str(info.value)) == [] and _leaks(repr(info.value.findings)) == []
    assert stat.S_IMODE(log.stat().st_mode) == 0o600


def test_build_output_on_the_terminal_holds_no_token(tmp_path: Path) -> None:
    printed = f"echo fatal error: cannot open /data/{GITHUB}/x.h; exit 3"
    manifest = tiny_project(tmp_path / "p", command=f"sh -c '{printed}'")
    for extra in ([], ["--json"]):
        proc = jitguard(
            ["build", "ninja", str(manifest), "--progress", "log", *extra], base_env(tmp_path / "c")
        )
        assert_no_traceback(proc)
        assert proc.returncode == 1
        assert "cannot open /data/" in proc.stdout + proc.stderr  # the evidence is shown, the token is not
        assert _leaks(proc.stdout + proc.stderr) == []


def test_the_json_envelope_redacts_values_as_well_as_names() -> None:
    from jitguard.cli.envelope import dumps

    text = dumps("doctor", {"facts": {"toolchain": {"cuda_home": ENV["CUDA_HOME"]}, "HF_TOKEN": "short"}})
    assert _leaks(text) == [] and "short" not in text
