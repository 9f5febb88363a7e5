"""Every `--json` output of the real CLI, run as a process on this GPU-less machine, validates against the
schema it names; and each schema rejects that same output once one real defect is put in it.

`jitguard build flashinfer-gdn --json` is validated in test_build_flashinfer_cli.py, beside its other runs.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from test_build_flashinfer_cli import _env, _jitguard

from envelope_schemas import assert_rejected, assert_valid
from jitguard.findings.model import Finding
from jitguard.state.failure_cache import FailureCache
from jitguard.state.job_memory import JobMemoryStore
from real.supervise.ninja_projects import write_project

Payload = dict[str, Any]


def envelope(tmp_path: Path, *args: str, rc: int) -> Payload:
    done = _jitguard([*args, "--json"], _env(tmp_path))
    assert "Traceback" not in done.stderr, done.stderr
    assert done.returncode == rc, done.stderr
    payload: Payload = json.loads(done.stdout)
    assert_valid(payload)
    return payload


def broken(payload: Payload, defect: Callable[[Payload], object]) -> Payload:
    copied = copy.deepcopy(payload)
    defect(copied)
    return copied


@pytest.fixture(scope="module")
def doctor(tmp_path_factory: pytest.TempPathFactory) -> Payload:
    return envelope(tmp_path_factory.mktemp("doctor"), "doctor", rc=1)  # 1: flashinfer is blocked here


def test_doctor_output_matches_its_schema(doctor: Payload) -> None:
    assert doctor["schema"] == "jitguard.doctor/1"
    assert set(doctor["backends"]) == {"flashinfer", "triton", "torch"}


def _first_finding(payload: Payload) -> Payload:
    finding: Payload = payload["backends"]["flashinfer"]["findings"][0]
    return finding


def _flip(verdict: Payload, key: str) -> None:
    verdict[key] = not verdict[key]


DOCTOR_DEFECTS: dict[str, Callable[[Payload], object]] = {
    "a severity outside error/warning/info": lambda p: _first_finding(p).update(severity="fatal"),
    "a finding without its fixes": lambda p: _first_finding(p).pop("fixes"),
    "a verdict its findings contradict": lambda p: _flip(p["backends"]["flashinfer"], "usable"),
    "an exit code the verdicts contradict": lambda p: p.update(exit_code=1 - p["exit_code"]),
    "no fingerprint": lambda p: p.pop("fingerprint"),
    "a key the envelope does not define": lambda p: p.update(verdict="ok"),
    "a backend jitguard does not have": lambda p: p["backends"].update(cuda=p["backends"]["torch"]),
    "a trace outcome outside the enum": lambda p: p["gdn_prefill"]["trace"][0].update(outcome="maybe"),
    "a decision where nothing is chosen": lambda p: [
        e.update(outcome="fallback") for e in p["gdn_prefill"]["trace"]
    ],
    "a facts section missing": lambda p: p["facts"].pop("link"),
}


@pytest.mark.parametrize("defect", DOCTOR_DEFECTS, ids=list(DOCTOR_DEFECTS))
def test_the_doctor_schema_rejects_a_real_defect(doctor: Payload, defect: str) -> None:
    assert_rejected(broken(doctor, DOCTOR_DEFECTS[defect]))


def test_cache_list_and_clear_match_the_cache_schema(tmp_path: Path) -> None:
    cache = FailureCache(tmp_path / "cache")
    libcuda = Finding("link-missing-libcuda", "error", "no libcuda", "links -lcuda", ("cannot find -lcuda",))
    cache.record_failure("gdn_prefill_sm90", "fp1", [libcuda], log_path="/logs/gdn.log")
    cache.record_success("jitguard_probe", "fp1")
    JobMemoryStore(cache.cache_dir).observe("gdn_prefill_sm90", 6 * 1024**3)

    listed = envelope(tmp_path, "cache", "list", rc=0)
    assert {e["outcome"] for e in listed["entries"]} == {"failure", "success"} and listed["job_memory"]
    assert_rejected(broken(listed, lambda p: p["entries"][0].update(outcome="maybe")))
    assert_rejected(broken(listed, lambda p: p.update(removed_outcomes=1)))  # list and clear never mix

    one = envelope(tmp_path, "cache", "list", "--module", "gdn-prefill/flashinfer", rc=0)
    assert [e["module"] for e in one["entries"]] == ["gdn_prefill_sm90"] and one["selected"]["prefixes"]
    assert_rejected(broken(one, lambda p: p["selected"].update(names=[])))

    module = envelope(tmp_path, "cache", "clear", "--module", "gdn_prefill_sm90", "--yes", rc=0)
    assert module["removed_by_module"] == {"gdn_prefill_sm90": 1}
    assert module["removed_job_memory_modules"] == ["gdn_prefill_sm90"]
    assert_rejected(broken(module, lambda p: p["removed_by_module"].update(gdn_prefill_sm90=0)))

    cleared = envelope(tmp_path, "cache", "clear", "--yes", rc=0)
    assert cleared["removed_outcomes"] == 1 and cleared["removed_by_module"] is None
    assert_rejected(broken(cleared, lambda p: p.update(removed_outcomes=-1)))


def test_build_ninja_built_up_to_date_and_failed_match_the_build_schema(tmp_path: Path) -> None:
    quick = write_project(tmp_path / "quick", jobs=2, mib=1, seconds=0.1)
    built = envelope(tmp_path, "build", "ninja", str(quick.root), "--progress", "none", rc=0)
    assert (built["status"], built["attempts"]) == ("built", 1)
    up_to_date = envelope(tmp_path, "build", "ninja", str(quick.root), "--progress", "none", rc=0)
    assert (up_to_date["status"], up_to_date["attempts"]) == ("up-to-date", 0)
    slow = write_project(tmp_path / "slow", jobs=1, mib=1, seconds=60)
    failed = envelope(
        tmp_path, "build", "ninja", str(slow.root), "--progress", "none", "--timeout", "1", rc=1
    )
    assert [f["code"] for f in failed["findings"]] == ["build-timeout"]

    assert_rejected(broken(built, lambda p: p.update(attempts=0)))  # "built" with nothing done
    assert_rejected(broken(built, lambda p: p.pop("log_path")))
    assert_rejected(broken(failed, lambda p: p.update(findings=[])))  # a failure must say why
    assert_rejected(broken(failed, lambda p: p.update(ok=True)))


@pytest.fixture(scope="module")
def gdn_run(tmp_path_factory: pytest.TempPathFactory) -> Payload:
    return envelope(tmp_path_factory.mktemp("gdn"), "gdn", "run", "--repeat", "1", rc=0)


def test_gdn_run_matches_its_schema(gdn_run: Payload) -> None:
    assert gdn_run["backend"] == "torch" and gdn_run["ok"] is True


def test_the_gdn_run_schema_rejects_two_chosen_backends_and_a_missing_error(gdn_run: Payload) -> None:
    assert_rejected(broken(gdn_run, lambda p: [e.update(outcome="chosen") for e in p["decision"]["trace"]]))
    assert_rejected(broken(gdn_run, lambda p: p["error"].pop("state_max_rel")))
    assert_rejected(broken(gdn_run, lambda p: p.update(dtype="bf16")))


def test_gdn_explain_matches_its_schema(tmp_path: Path) -> None:
    explained = envelope(tmp_path, "gdn", "explain", rc=0)
    assert explained["auto"]["backend"] == "torch" and explained["statuses"]["flashinfer"]["usable"] is False
    assert_rejected(broken(explained, lambda p: _flip(p["statuses"]["flashinfer"], "usable")))


def test_a_named_backend_that_cannot_run_is_an_error_envelope_with_its_findings(tmp_path: Path) -> None:
    error = envelope(tmp_path, "gdn", "run", "--backend", "flashinfer", "--repeat", "0", rc=1)["error"]
    assert (error["kind"], error["exit_code"]) == ("backend-unavailable", 1)
    assert "gpu-none" in [f["code"] for f in error["findings"]]


def test_a_usage_error_is_an_error_envelope(tmp_path: Path) -> None:
    error = envelope(tmp_path, "doctor", "--backend", "cuda", rc=2)["error"]
    assert (error["kind"], error["exit_code"]) == ("usage", 2)
