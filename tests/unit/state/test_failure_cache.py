"""The failure cache: outcome per (module, fingerprint), atomic, corruption-tolerant, TTL, concurrent-safe."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from jitguard import __version__
from jitguard.errors import ConfigError
from jitguard.fileio import write_json
from jitguard.findings.model import Finding, Fix
from jitguard.state.failure_cache import DEFAULT_TTL_S, FailureCache, ttl_from_env

FP = "fp-" + "a" * 60
LIBCUDA = Finding(
    code="link-missing-libcuda",
    severity="error",
    title="The linker cannot find libcuda",
    cause="FlashInfer links with -lcuda",
    evidence=("/usr/bin/ld: cannot find -lcuda",),
    fixes=(Fix("Point the linker at libcuda", "export FLASHINFER_EXTRA_LDFLAGS=-L/usr/lib64"),),
    backend="flashinfer",
)


@pytest.fixture
def cache(tmp_path: Path) -> FailureCache:
    return FailureCache(tmp_path)


def test_empty_cache_is_a_miss(cache: FailureCache) -> None:
    assert cache.get("gdn_prefill_sm90", FP) is None
    assert cache.entries() == []


def test_recorded_failure_round_trips_findings_log_and_version(cache: FailureCache, tmp_path: Path) -> None:
    cache.record_failure("gdn_prefill_sm90", FP, [LIBCUDA], log_path=tmp_path / "build.log")
    record = cache.get("gdn_prefill_sm90", FP)
    assert record is not None
    assert record.findings == (LIBCUDA,)
    assert record.codes == ("link-missing-libcuda",)
    assert record.log_path == str(tmp_path / "build.log")
    assert record.jitguard_version == __version__
    assert record.module == "gdn_prefill_sm90" and record.fingerprint == FP
    assert record.failed


def test_a_success_is_not_a_failure_but_is_remembered(cache: FailureCache) -> None:
    cache.record_failure("m", FP, [LIBCUDA])
    cache.record_success("m", FP)
    assert cache.get("m", FP) is None
    outcome = cache.lookup("m", FP)
    assert outcome is not None and outcome.outcome == "success" and outcome.findings == ()


@pytest.mark.parametrize(
    "code",
    ["build-timeout", "build-stalled", "build-interrupted", "lock-timeout", "disk-full", "memory-too-small"],
)
def test_a_failure_with_a_transient_cause_is_not_cached(cache: FailureCache, code: str) -> None:
    transient = Finding(code, "error", "t", "c")
    assert cache.record_failure("m", FP, [LIBCUDA, transient]) is None
    assert cache.get("m", FP) is None
    assert cache.entries() == []


def test_a_failure_without_findings_is_not_cached(cache: FailureCache) -> None:
    assert cache.record_failure("m", FP, []) is None
    assert cache.get("m", FP) is None


def test_a_changed_fingerprint_is_a_miss(cache: FailureCache) -> None:
    cache.record_failure("m", FP, [LIBCUDA])
    assert cache.get("m", FP + "-changed") is None
    assert cache.get("m", FP) is not None


def test_a_failure_of_other_sources_is_a_miss_for_callers_that_know_the_sources(cache: FailureCache) -> None:
    cache.record_failure("custom", FP, [LIBCUDA], source_digest="sources-v1")
    assert cache.get("custom", FP, source_digest="sources-v2") is None
    assert cache.get("custom", FP, source_digest="sources-v1") is not None
    assert cache.get("custom", FP) is not None  # a caller that does not know the sources still sees it


def test_entries_expire_after_the_ttl(tmp_path: Path) -> None:
    cache = FailureCache(tmp_path, ttl=60)
    record = cache.record_failure("m", FP, [LIBCUDA])
    assert cache.get("m", FP, now=record.created + 59) is not None
    assert cache.get("m", FP, now=record.created + 61) is None
    assert cache.entries(now=record.created + 61) == []
    assert len(cache.entries(now=record.created + 61, include_expired=True)) == 1
    assert cache.prune(now=record.created + 61) == 1
    assert cache.entries(include_expired=True) == []


@pytest.mark.parametrize(
    "content",
    [
        b"",
        b"{not json",
        b'{"schema": "jitguard.failure-cache/1", "module": "m"',  # truncated
        b"[1, 2, 3]",
        b'{"schema": "jitguard.failure-cache/99", "module": "m"}',
        b"\xff\xfe\x00garbage",
    ],
    ids=["empty", "not-json", "truncated", "not-an-object", "other-schema", "binary"],
)
def test_a_corrupt_file_is_a_miss_never_an_error(cache: FailureCache, content: bytes) -> None:
    path = cache.path_for("m", FP)
    path.parent.mkdir(parents=True)
    path.write_bytes(content)
    assert cache.get("m", FP) is None
    assert cache.entries() == []
    assert cache.clear() == 1


def test_a_record_with_malformed_fields_is_a_miss(cache: FailureCache) -> None:
    good = cache.record_failure("m", FP, [LIBCUDA]).to_json()
    path = cache.path_for("m", FP)
    for broken in (
        {**good, "findings": [{"code": "x"}]},  # a finding without its fields
        {**good, "created": "yesterday"},
        {**good, "outcome": "maybe"},
        {**good, "module": 42},
        {**good, "fingerprint": "another environment"},  # a file that is not this key's
        {**good, "created": good["created"] + 10 * 24 * 3600},  # from the future
    ):
        path.write_text(json.dumps(broken))
        assert cache.get("m", FP) is None, broken


def test_a_failed_write_leaves_the_previous_record_and_no_temp_file(cache: FailureCache) -> None:
    cache.record_failure("m", FP, [LIBCUDA])
    path = cache.path_for("m", FP)
    with pytest.raises(TypeError):
        write_json(path, {"unserialisable": object()})
    assert cache.get("m", FP) is not None
    assert sorted(p.name for p in path.parent.iterdir()) == [path.name]


def test_forget_removes_every_fingerprint_of_one_module_only(cache: FailureCache) -> None:
    cache.record_failure("m", FP, [LIBCUDA])
    cache.record_failure("m", FP + "2", [LIBCUDA])
    cache.record_failure("other", FP, [LIBCUDA])
    assert cache.forget(["m"]) == {"m": 2}
    assert [r.module for r in cache.entries()] == ["other"]


def test_odd_module_names_stay_inside_the_cache_dir(cache: FailureCache) -> None:
    cache.record_failure("../../etc/evil name", FP, [LIBCUDA])
    assert cache.path_for("../../etc/evil name", FP).parent == cache.root
    assert cache.get("../../etc/evil name", FP) is not None
    assert cache.get("______etc_evil_name", FP) is None


def test_clear_removes_everything_and_counts(cache: FailureCache) -> None:
    cache.record_failure("a", FP, [LIBCUDA])
    cache.record_success("b", FP)
    assert cache.clear() == 2
    assert cache.entries() == []
    assert FailureCache(cache.cache_dir / "never-created").clear() == 0


def test_ttl_comes_from_the_environment() -> None:
    assert ttl_from_env({}) == DEFAULT_TTL_S
    assert ttl_from_env({"JITGUARD_FAILURE_TTL": "2h"}) == 7200
    with pytest.raises(ConfigError, match="JITGUARD_FAILURE_TTL"):
        ttl_from_env({"JITGUARD_FAILURE_TTL": "soon"})
    with pytest.raises(ConfigError, match="JITGUARD_FAILURE_TTL"):
        ttl_from_env({"JITGUARD_FAILURE_TTL": "0"})


_WRITER = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from jitguard.findings.model import Finding
    from jitguard.state.failure_cache import FailureCache

    cache, me, rounds = FailureCache(Path(sys.argv[1])), int(sys.argv[2]), int(sys.argv[3])
    for i in range(rounds):
        finding = Finding("build-failed", "error", f"writer {me} round {i}", "x" * 2000, evidence=("e",) * 50)
        if i % 3 == 2:
            cache.record_success("shared", "fp")
        else:
            cache.record_failure("shared", "fp", [finding], log_path=f"/logs/{me}/{i}")
        cache.record_failure(f"own-{me}", "fp", [finding])
    """
)

_READER = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from jitguard.state.failure_cache import FailureCache

    cache, path = FailureCache(Path(sys.argv[1])), Path(sys.argv[2])
    seen = torn = 0
    deadline = time.time() + 60
    while not path.exists() and time.time() < deadline:
        time.sleep(0.001)
    while not Path(sys.argv[1], "done").exists() and time.time() < deadline:
        seen += 1
        if cache.lookup("shared", "fp") is None:
            torn += 1
    print(seen, torn)
    """
)


def test_concurrent_writers_never_expose_a_torn_record(tmp_path: Path) -> None:
    """Real processes: writers replace one key while a reader looks it up; every read is a whole record."""
    cache = FailureCache(tmp_path)
    reader = subprocess.Popen(
        [sys.executable, "-c", _READER, str(tmp_path), str(cache.path_for("shared", "fp"))],
        stdout=subprocess.PIPE,
        text=True,
    )
    writers = [
        subprocess.Popen([sys.executable, "-c", _WRITER, str(tmp_path), str(n), "60"]) for n in range(4)
    ]
    assert [w.wait(timeout=120) for w in writers] == [0, 0, 0, 0]
    (tmp_path / "done").touch()
    out, _ = reader.communicate(timeout=120)
    seen, torn = map(int, out.split())
    assert reader.returncode == 0
    assert seen > 0
    assert torn == 0
    assert cache.lookup("shared", "fp") is not None
    assert sorted(r.module for r in cache.entries()) == ["own-0", "own-1", "own-2", "own-3", "shared"]
    assert not [p for p in cache.root.iterdir() if p.name.startswith(".")], "temp files left behind"


def test_failures_reads_named_modules_and_prefixes_of_one_fingerprint_only(cache: FailureCache) -> None:
    cache.record_failure("gdn-prefill/flashinfer", FP, [LIBCUDA])
    cache.record_failure("gdn_prefill_sm90", FP, [LIBCUDA])
    cache.record_failure("gdn_prefill_sm90_other", FP, [LIBCUDA])
    cache.record_failure("sampling", FP, [LIBCUDA])
    cache.record_failure("gdn_prefill_sm90", "another-fingerprint", [LIBCUDA])
    cache.record_success("gdn_prefill_sm90_ok", FP)

    by_name = cache.failures(FP, modules=("gdn-prefill/flashinfer",))
    assert [r.module for r in by_name] == ["gdn-prefill/flashinfer"]
    by_prefix = cache.failures(FP, prefixes=("gdn_prefill",))
    assert sorted(r.module for r in by_prefix) == ["gdn_prefill_sm90", "gdn_prefill_sm90_other"]
    assert all(r.fingerprint == FP and r.failed for r in by_prefix)
    both = cache.failures(FP, modules=("gdn_prefill_sm90",), prefixes=("gdn_prefill",))
    assert sorted(r.module for r in both) == ["gdn_prefill_sm90", "gdn_prefill_sm90_other"]  # each once
    assert cache.failures(FP) == []
    assert cache.failures("no-such-fingerprint", prefixes=("",)) == []
