"""The engine proof's skip rule (``jitguard.integrations.proof``): a start may skip the proof call only where a
pass is recorded under its key, which holds the fingerprint (package versions, GPU arch and driver) and the
installed files of FlashInfer and the CUTLASS DSL. Run on this machine's real facts and a real copy of its
nvidia-cutlass-dsl install (tests/dsl_copies.py) first on sys.path, with a real failure cache and proof
record in a fresh cache dir; each "start" is a fresh guard, as each engine process has one."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from dsl_copies import copy_dsl, dsl_file
from jitguard.boundary.process_facts import ProcessFacts
from jitguard.decision.engine_verdicts import GDN_PREFILL
from jitguard.facts.installed_files import installed_files
from jitguard.integrations.choices import ChoiceGuard
from jitguard.integrations.proof import Trial, prove
from jitguard.state.failure_cache import FailureCache

CORE = "nvidia-cutlass-dsl-libs-core"
BY_RECORD = "proven by record, no call at"
TRIAL = Trial(GDN_PREFILL, "a test's proof call")


@pytest.fixture(scope="module")
def facts() -> ProcessFacts:
    """This machine's facts, collected once (the same fingerprint for every start of the module)."""
    collected = ProcessFacts()
    collected.get()
    return collected


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A copy of the installed DSL first on sys.path, its ``cutlass/__init__.py`` a real file; a fresh cache."""
    monkeypatch.setenv("JITGUARD_CACHE_DIR", str(tmp_path / "cache"))
    copied = dsl_file(CORE, "dsl_packages/cutlass/__init__.py")
    root = copy_dsl(tmp_path / "env", copied=[copied])
    monkeypatch.syspath_prepend(str(root))
    yield root


class Kernel:
    """The engine's function the proof calls: counts its calls, raises when told to."""

    def __init__(self) -> None:
        self.calls = 0
        self.error: Exception | None = None

    def __call__(self) -> None:
        self.calls += 1
        if self.error is not None:
            raise self.error


def start(facts: ProcessFacts, kernel: Kernel) -> tuple[bool, ChoiceGuard]:
    guard = ChoiceGuard("SGLang", facts)
    return prove(guard, TRIAL, kernel), guard


def test_the_digest_follows_the_installed_files(site: Path) -> None:
    before = installed_files()
    assert any(name == CORE for name, _ in before.versions) and before.files > 100
    (site / dsl_file(CORE, "dsl_packages/cutlass/__init__.py")).write_text("# rewritten in place\n")
    assert installed_files().digest != before.digest


def test_a_recorded_pass_skips_the_call_at_the_next_start(
    site: Path, facts: ProcessFacts, caplog: pytest.LogCaptureFixture
) -> None:
    kernel = Kernel()
    kept, guard = start(facts, kernel)
    assert kept and guard.is_proven(GDN_PREFILL) and kernel.calls == 1
    with caplog.at_level(logging.INFO, logger="jitguard"):
        kept, guard = start(facts, kernel)
    assert kept and guard.is_proven(GDN_PREFILL)
    assert kernel.calls == 1  # not called again
    assert [r.message for r in caplog.records if BY_RECORD in r.message], caplog.text


def test_an_installed_file_changed_in_place_makes_the_proof_run_again(
    site: Path, facts: ProcessFacts
) -> None:
    kernel = Kernel()
    start(facts, kernel)
    start(facts, kernel)
    assert kernel.calls == 1
    with (site / dsl_file(CORE, "dsl_packages/cutlass/__init__.py")).open("a") as file:
        file.write("# one line more\n")
    kept, _ = start(facts, kernel)
    assert kept and kernel.calls == 2


def test_another_version_makes_the_proof_run_again(site: Path, facts: ProcessFacts) -> None:
    kernel = Kernel()
    start(facts, kernel)
    [metadata] = list(site.glob("nvidia_cutlass_dsl_libs_core-*.dist-info/METADATA"))
    text = metadata.read_text()
    version = next(line for line in text.splitlines() if line.startswith("Version: "))
    metadata.write_text(text.replace(version, version + ".post9", 1))
    start(facts, kernel)
    assert kernel.calls == 2


def test_a_failed_call_records_no_pass_and_the_failure_by_fingerprint(
    site: Path, facts: ProcessFacts
) -> None:
    kernel = Kernel()
    kernel.error = NotImplementedError("SM90 GDN prefill DSL kernel is unavailable")
    kept, guard = start(facts, kernel)
    assert not kept and guard.known_failed(GDN_PREFILL) and not guard.is_proven(GDN_PREFILL)
    records = FailureCache(site.parents[3] / "cache").entries()
    assert [(r.module, r.codes, r.fingerprint) for r in records] == [
        ("gdn-prefill/flashinfer", ("engine-proof-failed",), facts.get().fingerprint)
    ]
    kernel.error = None
    start(facts, kernel)
    assert kernel.calls == 2  # no pass was recorded: the next start calls again
