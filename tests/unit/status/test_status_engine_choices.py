"""The status service: FlashInfer GDN prefill's status for the engine guard is the op's FlashInfer pre-flight
plus both kinds of recorded failure (the op's own and FlashInfer's GDN modules'), read from one real failure
cache at once, under this host's fingerprint only; the op's dispatcher is never asked."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from jitguard.decision.engine_verdicts import GDN_PREFILL, SAMPLER
from jitguard.facts import Facts, collect
from jitguard.findings.catalog import make
from jitguard.state.failure_cache import FailureCache
from jitguard.state.module_names import GDN_OP_FLASHINFER
from jitguard.status.engine_choices import gdn_status, recorded_failures, status_of
from jitguard.status.gdn_backends import FLASHINFER_GDN, BackendStatuses


@pytest.fixture(scope="module")
def facts(tmp_path_factory: pytest.TempPathFactory) -> Facts:
    home = tmp_path_factory.mktemp("home")
    env = {"HOME": str(home), "PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    return collect(env, cache_dir=home / "cache")


def _record(cache_dir: Path, module: str, fingerprint: str) -> None:
    found = [make("link-missing-libcuda", backend="flashinfer", evidence=["cannot find -lcuda"])]
    assert FailureCache(cache_dir).record_failure(module, fingerprint, found, "/tmp/build.log") is not None


def test_both_records_reach_the_gdn_status_and_another_hosts_do_not(facts: Facts, tmp_path: Path) -> None:
    cache_dir = tmp_path / "cache"
    _record(cache_dir, GDN_OP_FLASHINFER, facts.fingerprint)
    _record(cache_dir, "gdn_prefill_sm90", facts.fingerprint)
    _record(cache_dir, "gdn_prefill_sm90_other", "another-host-fingerprint")
    sys.modules.pop("jitguard.gdn.dispatch", None)

    status = gdn_status(facts, cache_dir)

    cached = [(f.code, f.cause) for f in status.findings if f.code.endswith("cached-failure")]
    assert sorted(code for code, _ in cached) == ["flashinfer-cached-failure", "gdn-cached-failure"]
    assert "gdn_prefill_sm90_other" not in " ".join(cause for _, cause in cached)
    assert not status.usable
    assert not status_of(GDN_PREFILL, facts, cache_dir, gdn=status).usable
    assert "jitguard.gdn.dispatch" not in sys.modules  # the op's dispatcher was not asked


def test_the_op_and_the_guard_read_the_ops_record_alike(facts: Facts, tmp_path: Path) -> None:
    cache_dir = tmp_path / "cache"
    _record(cache_dir, GDN_OP_FLASHINFER, facts.fingerprint)
    op = BackendStatuses(facts=facts, cache_dir=cache_dir).status(FLASHINFER_GDN)
    guard = gdn_status(facts, cache_dir)
    assert [f.to_json() for f in op.findings] == [f.to_json() for f in guard.findings]


def test_a_choices_records_are_its_own_modules_only(facts: Facts, tmp_path: Path) -> None:
    cache_dir = tmp_path / "cache"
    _record(cache_dir, "sampling", facts.fingerprint)
    _record(cache_dir, "gdn_prefill_sm90", facts.fingerprint)
    assert [f.code for f in recorded_failures(facts, SAMPLER, cache_dir)] == ["flashinfer-cached-failure"]
    assert not status_of(SAMPLER, facts, cache_dir).usable
    assert recorded_failures(facts, SAMPLER, tmp_path / "empty") == []
