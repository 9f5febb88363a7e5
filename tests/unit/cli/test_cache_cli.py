"""`jitguard cache list|clear` on a real cache directory."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from jitguard.cli import main
from jitguard.findings.model import Finding
from jitguard.state.failure_cache import FailureCache
from jitguard.state.job_memory import JobMemoryStore

LIBCUDA = Finding("link-missing-libcuda", "error", "no libcuda", "links -lcuda", ("cannot find -lcuda",))


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FailureCache:
    monkeypatch.setenv("JITGUARD_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("NO_COLOR", "1")
    monkeypatch.delenv("JITGUARD_FAILURE_TTL", raising=False)
    return FailureCache(tmp_path)


def test_list_on_an_empty_cache_says_so(cache: FailureCache, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["cache", "list"]) == 0
    assert "No cached build outcomes" in capsys.readouterr().out


def test_list_shows_each_outcome_with_its_codes(
    cache: FailureCache, capsys: pytest.CaptureFixture[str]
) -> None:
    cache.record_failure("gdn_prefill_sm90", "fp1", [LIBCUDA], log_path="/logs/gdn.log")
    cache.record_success("jitguard_probe", "fp1")
    JobMemoryStore(cache.cache_dir).observe("gdn_prefill_sm90", 6 * 1024**3)
    assert main(["cache", "list"]) == 0
    out = capsys.readouterr().out
    assert "gdn_prefill_sm90" in out and "link-missing-libcuda" in out and "failure" in out
    assert "jitguard_probe" in out and "success" in out
    assert "6.0 GiB" in out
    assert "jitguard cache clear --module" in out


def test_list_json_is_the_versioned_envelope(cache: FailureCache, capsys: pytest.CaptureFixture[str]) -> None:
    cache.record_failure("gdn_prefill_sm90", "fp1", [LIBCUDA])
    assert main(["cache", "list", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["schema"] == "jitguard.cache/1"
    (entry,) = data["entries"]
    assert entry["module"] == "gdn_prefill_sm90"
    assert entry["outcome"] == "failure"
    assert [f["code"] for f in entry["findings"]] == ["link-missing-libcuda"]
    assert entry["expired"] is False


def test_list_survives_a_corrupt_file(cache: FailureCache, capsys: pytest.CaptureFixture[str]) -> None:
    cache.record_failure("good", "fp", [LIBCUDA])
    (cache.root / "bad@0123.json").write_text("{oops")
    assert main(["cache", "list", "--json"]) == 0
    assert [e["module"] for e in json.loads(capsys.readouterr().out)["entries"]] == ["good"]


def test_clear_yes_removes_everything(cache: FailureCache, capsys: pytest.CaptureFixture[str]) -> None:
    cache.record_failure("a", "fp", [LIBCUDA])
    cache.record_failure("b", "fp", [LIBCUDA])
    (cache.root / "bad@0123.json").write_text("{oops")
    assert main(["cache", "clear", "--yes"]) == 0
    assert "Removed 3 cached outcome(s)" in capsys.readouterr().out
    assert cache.entries() == [] and list(cache.root.iterdir()) == []


def test_clear_one_module_keeps_the_others(cache: FailureCache, capsys: pytest.CaptureFixture[str]) -> None:
    cache.record_failure("a", "fp", [LIBCUDA])
    cache.record_failure("b", "fp", [LIBCUDA])
    assert main(["cache", "clear", "--module", "a", "--yes", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["removed_outcomes"] == 1
    assert [r.module for r in cache.entries()] == ["b"]


def test_clear_without_yes_off_a_terminal_is_a_usage_error_and_removes_nothing(
    cache: FailureCache, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    cache.record_failure("a", "fp", [LIBCUDA])
    monkeypatch.setattr("sys.stdin", io.StringIO("y\n"))  # not a TTY, even though it would say yes
    assert main(["cache", "clear"]) == 2
    assert "--yes" in capsys.readouterr().err
    assert len(cache.entries()) == 1


def test_cache_without_an_action_is_a_usage_error(
    cache: FailureCache, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["cache"]) == 2
    assert "list or clear" in capsys.readouterr().err


def test_a_bad_ttl_is_a_usage_error(
    cache: FailureCache, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("JITGUARD_FAILURE_TTL", "forever")
    assert main(["cache", "list"]) == 2
    assert "JITGUARD_FAILURE_TTL" in capsys.readouterr().err


def test_clear_a_gdn_prefill_name_forgets_the_op_and_its_modules_and_says_which(
    cache: FailureCache, capsys: pytest.CaptureFixture[str]
) -> None:
    for module in (
        "gdn-prefill/flashinfer",
        "gdn_prefill_sm90",
        "gdn_prefill_sm90_only_bf16_g1b1a1i1",
        "sampling",
    ):
        cache.record_failure(module, "fp", [LIBCUDA])
    JobMemoryStore(cache.cache_dir).observe("gdn_prefill_sm90", 6 * 1024**3)
    assert main(["cache", "clear", "--module", "gdn_prefill_sm90", "--yes"]) == 0
    out = capsys.readouterr().out
    assert (
        "gdn-prefill/flashinfer (1), gdn_prefill_sm90 (1), gdn_prefill_sm90_only_bf16_g1b1a1i1 (1); "
        "learned memory of gdn_prefill_sm90."
    ) in out
    assert "go together" in out
    assert [r.module for r in cache.entries()] == ["sampling"]


def test_clear_a_name_without_records_says_nothing_matched(
    cache: FailureCache, capsys: pytest.CaptureFixture[str]
) -> None:
    cache.record_failure("sampling", "fp", [LIBCUDA])
    assert main(["cache", "clear", "--module", "gdn-prefill/triton", "--yes", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert (data["removed_outcomes"], data["removed_by_module"]) == (0, {})
    assert data["selected"] == {"names": ["gdn-prefill/triton"], "prefixes": [], "group": None}
    assert main(["cache", "clear", "--module", "gdn-prefill/triton", "--yes"]) == 0
    assert "nothing matched" in capsys.readouterr().out
    assert len(cache.entries()) == 1


def test_list_module_lists_only_the_records_it_stands_for(
    cache: FailureCache, capsys: pytest.CaptureFixture[str]
) -> None:
    cache.record_failure("gdn-prefill/flashinfer", "fp", [LIBCUDA])
    cache.record_failure("sampling", "fp", [LIBCUDA])
    assert main(["cache", "list", "--module", "gdn_prefill_sm90", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [e["module"] for e in data["entries"]] == ["gdn-prefill/flashinfer"]
    assert data["selected"]["group"] == "FlashInfer GDN prefill"


def test_list_marks_the_records_made_in_this_environment(
    cache: FailureCache, capsys: pytest.CaptureFixture[str]
) -> None:
    from jitguard.facts import collect

    here = collect(cache_dir=cache.cache_dir).fingerprint
    cache.record_failure("made-here", here, [LIBCUDA])
    cache.record_failure("made-elsewhere", "0123456789abcdef", [LIBCUDA])
    assert main(["cache", "list", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["fingerprint"] == here
    assert {e["module"]: e["this_environment"] for e in data["entries"]} == {
        "made-here": True,
        "made-elsewhere": False,
    }
    assert main(["cache", "list"]) == 0
    out = capsys.readouterr().out
    assert f"this environment's is {here}" in out and "here: yes" in out


def test_list_and_clear_the_kept_cutedsl_kernels(
    cache: FailureCache, capsys: pytest.CaptureFixture[str]
) -> None:
    from envelope_schemas import assert_valid as validate
    from jitguard.cutedsl.kernel_cache import KernelCache, KernelKey

    kernels = KernelCache(cache.cache_dir)
    key = KernelKey("_FullyFusedDeltaRuleSm90(BFloat16, alpha, beta)", {"kernel": "k", "arch": "sm_90a"})
    assert kernels.put(key, b"\x7fELF" + b"\0" * 4096, format="cute-object")
    assert main(["cache", "list"]) == 0
    out = capsys.readouterr().out
    assert "CuTeDSL kernels kept for later processes" in out and "_FullyFusedDeltaRuleSm90(BFloat16" in out
    assert main(["cache", "list", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    validate(listed)
    assert [(k["name"], k["digest"], k["bytes"]) for k in listed["kernels"]] == [(key.name, key.digest, 4100)]
    assert main(["cache", "list", "--module", "sampling", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["kernels"] == []  # kernels belong to no module
    assert main(["cache", "clear", "--module", "sampling", "--yes"]) == 0
    capsys.readouterr()
    assert kernels.get(key).entry is not None  # --module leaves them alone
    assert main(["cache", "clear", "--yes", "--json"]) == 0
    cleared = json.loads(capsys.readouterr().out)
    validate(cleared)
    assert cleared["removed_kernel_files"] == 2 and kernels.entries() == []
