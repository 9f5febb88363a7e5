"""Drift made loud: a vLLM release outside the range jitguard knows gives one warning, and the choice sites
are found by name in a real package tree on the import path (written here, never imported), or in a prepared
real release."""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from fake_dists import make_dist
from jitguard.decision.engine_release import covers
from jitguard.integrations import vllm as plugin
from jitguard.integrations.vllm import LAYER_INIT_SITE, MODEL_FILE, SITES, coverage
from jitguard.integrations.vllm.attention import MODULE as ATTENTION_MODULE
from jitguard.integrations.vllm.predicates import KERNELS_PREDICATE
from jitguard.integrations.vllm.predicates import MODULE as PREDICATES_MODULE
from jitguard.integrations.vllm.sampler import CLASS as SAMPLER_CLASS
from jitguard.integrations.vllm.sampler import MODULE as SAMPLER_MODULE
from jitguard.integrations.vllm.sampler import PREDICATE as SAMPLER_PREDICATE
from release_preparation import PREPARE_ONE_TIMEOUT, vllm_source

BASE = "vllm.v1.attention.backend"
SAMPLER_INIT = f"{SAMPLER_CLASS}.__init__"


def _source(target: str, module: str) -> str:
    """A module defining ``target`` ('f', 'C.m' or 'a, b') the way vLLM does; the attention backend's method
    is inherited from a base class in another module, as in vLLM."""
    if module == ATTENTION_MODULE:
        cls = target.partition(".")[0]
        return f"from {BASE} import AttentionBackend\n\n\nclass {cls}(AttentionBackend):\n    pass\n"
    lines = []
    for name in (n.strip() for n in target.split(",")):
        owner, _, method = name.partition(".")
        if method:
            lines.append(f"class {owner}:\n    def {method}(self):\n        pass\n")
        else:
            lines.append(f"def {owner}():\n    pass\n")
    return "\n\n".join(lines)


def _write_vllm(root: Path, version: str) -> None:
    """vLLM ``version``'s newest layout under ``root``: every site module, a package ``__init__`` that fails
    if anything imports it, and a dist-info with the version."""
    old = {LAYER_INIT_SITE.module, MODEL_FILE.module}
    modules: dict[str, list[str]] = {}
    for site in SITES:
        if site.module not in old:
            modules.setdefault(site.module, []).append(_source(site.target, site.module))
    modules[BASE] = [
        "class AttentionBackend:\n    @classmethod\n    def validate_configuration(cls):\n        pass\n"
    ]
    for module, parts in modules.items():
        path = root / Path(*module.split("."))
        for depth in range(1, len(module.split("."))):
            init = root / Path(*module.split(".")[:depth]) / "__init__.py"
            init.parent.mkdir(parents=True, exist_ok=True)
            if not init.exists():
                init.write_text('raise RuntimeError("jitguard imported vLLM")\n')
        path.with_suffix(".py").write_text("\n\n".join(dict.fromkeys(parts)))
    make_dist(root, "vllm", version)


@pytest.fixture
def fresh(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.delenv("JITGUARD_DISABLE", raising=False)
    coverage.forget()
    yield
    coverage.forget()
    plugin.unregister()
    for name in [n for n in sys.modules if n == "vllm" or n.startswith("vllm.")]:
        del sys.modules[name]


def test_every_choice_of_a_known_layout_is_found_without_importing_vllm(site: Path, fresh: None) -> None:
    _write_vllm(site, "0.33.0")
    found = coverage.coverage()
    assert found.summary == "vLLM 0.33.0: 6 of 6 choice sites found"
    assert found.unguarded is None
    assert "vllm" not in sys.modules


def test_a_renamed_function_and_a_removed_module_are_named(site: Path, fresh: None) -> None:
    _write_vllm(site, "0.33.0")
    predicates = site / Path(*PREDICATES_MODULE.split(".")).with_suffix(".py")
    predicates.write_text(
        predicates.read_text().replace(f"def {KERNELS_PREDICATE}(", "def has_flashinfer_v2(")
    )
    (site / Path(*ATTENTION_MODULE.split(".")).with_suffix(".py")).unlink()

    found = coverage.coverage()

    assert found.summary == "vLLM 0.33.0: 3 of 6 choice sites found"
    missing = {
        c.key: [(s.module, s.target, s.state) for s in c.missing] for c in found.choices if not c.found
    }
    attention = [(ATTENTION_MODULE, "FlashInferBackend.validate_configuration", "module missing")]
    assert missing == {
        "attention": attention,
        "kv-cache": attention,
        "flashinfer-ops": [(PREDICATES_MODULE, KERNELS_PREDICATE, "name not found")],
    }
    assert found.unguarded is not None and f"{PREDICATES_MODULE}.{KERNELS_PREDICATE}: name not found" in (
        found.unguarded
    )


def _drop_v1_sampler(site: Path) -> None:
    """What vLLM 0.34 did: the V1 model runner, and ``TopKTopPSampler`` with it, removed from the sampler's
    module; the predicate and ``flashinfer_sample`` stay."""
    path = site / Path(*SAMPLER_MODULE.split(".")).with_suffix(".py")
    source = path.read_text()
    owner = SAMPLER_INIT.partition(".")[0]
    start = source.index(f"class {owner}:")
    end = source.index("\n\n", start)
    path.write_text(source[:start] + source[end:])
    assert f"class {owner}" not in path.read_text()


def test_a_site_whose_range_ended_is_not_expected_in_a_later_release(site: Path, fresh: None) -> None:
    [ended] = [s for s in SITES if s.target == SAMPLER_INIT]
    assert ended.releases.endswith("-0.33") and covers(ended.releases, "0.33.0")
    _write_vllm(site, "0.34.0")
    _drop_v1_sampler(site)
    found = coverage.coverage()
    assert found.summary == "vLLM 0.34.0: 6 of 6 choice sites found"
    assert found.unguarded is None
    assert coverage.drift_warning("0.34.0") is None


def test_a_site_whose_range_ended_is_judged_by_a_later_release_too(site: Path, fresh: None) -> None:
    # 0.35 is newer than jitguard knows: judged as 0.34, which no longer has the V1 sampler either.
    _write_vllm(site, "0.35.0")
    _drop_v1_sampler(site)
    assert coverage.coverage().unguarded is None


def test_a_site_is_still_missed_in_a_release_its_range_covers(site: Path, fresh: None) -> None:
    _write_vllm(site, "0.33.0")
    _drop_v1_sampler(site)
    found = coverage.coverage()
    assert found.summary == "vLLM 0.33.0: 5 of 6 choice sites found"
    assert found.unguarded == (
        f"not guarded: FlashInfer top-k/top-p sampler ({SAMPLER_MODULE}.{SAMPLER_INIT}: name not found)"
    )


def test_an_open_range_site_is_expected_in_a_release_newer_than_jitguard_knows(
    site: Path, fresh: None
) -> None:
    _write_vllm(site, "0.40.0")
    path = site / Path(*SAMPLER_MODULE.split(".")).with_suffix(".py")
    path.write_text(path.read_text().replace(f"def {SAMPLER_PREDICATE}(", "def flashinfer_sampler_ok("))
    found = coverage.coverage()
    assert found.summary == "vLLM 0.40.0: 5 of 6 choice sites found"
    assert found.unguarded is not None and f"{SAMPLER_MODULE}.{SAMPLER_PREDICATE}: name not found" in (
        found.unguarded
    )


def test_gdn_prefill_is_found_through_any_of_its_layouts(site: Path, fresh: None) -> None:
    _write_vllm(site, "0.20.0")
    path = site / Path(*LAYER_INIT_SITE.module.split(".")).with_suffix(".py")
    path.write_text("class ChunkGatedDeltaRule:\n    def __init__(self):\n        pass\n")
    assert coverage.coverage().summary == "vLLM 0.20.0: 6 of 6 choice sites found"


def test_a_release_outside_the_range_gives_one_warning(
    site: Path, fresh: None, caplog: pytest.LogCaptureFixture
) -> None:
    _write_vllm(site, "0.35.0")
    with caplog.at_level(logging.INFO, logger="jitguard"):
        assert plugin.register(status=lambda: pytest.fail("not asked"))
        plugin.register()
    drift = [r.getMessage() for r in caplog.records if "newer than the releases" in r.getMessage()]
    assert drift == [
        "jitguard: vLLM 0.35.0 is newer than the releases jitguard knows (0.17-0.34): its choice sites were "
        "checked by name; upgrade jitguard (`pip install -U .` from a newer checkout) for a release it knows."
    ]
    assert [r.getMessage() for r in caplog.records if "choice sites found" in r.getMessage()] == [
        "jitguard: vLLM 0.35.0: 6 of 6 choice sites found"
    ]
    assert "vllm" not in sys.modules


def test_a_release_in_the_range_gives_no_warning(
    site: Path, fresh: None, caplog: pytest.LogCaptureFixture
) -> None:
    _write_vllm(site, "0.33.0")
    with caplog.at_level(logging.INFO, logger="jitguard"):
        assert plugin.register()
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING and "vLLM 0.33.0" in r.getMessage()]
    assert not [r for r in caplog.records if "not guarded" in r.getMessage()]
    assert coverage.drift_warning("0.17.1") is None
    assert coverage.drift_warning("0.34.0") is None
    assert coverage.drift_warning("0.16.0") is not None


def test_an_unguarded_choice_is_warned_about_at_register(
    site: Path, fresh: None, caplog: pytest.LogCaptureFixture
) -> None:
    _write_vllm(site, "0.33.0")
    (site / Path(*ATTENTION_MODULE.split(".")).with_suffix(".py")).unlink()
    with caplog.at_level(logging.INFO, logger="jitguard"):
        assert plugin.register()
    warnings = [r.getMessage() for r in caplog.records if "not guarded" in r.getMessage()]
    assert len(warnings) == 1 and f"({ATTENTION_MODULE}.FlashInferBackend" in warnings[0]


@pytest.mark.timeout(PREPARE_ONE_TIMEOUT + 300)
def test_every_choice_is_found_in_the_real_033_release(fresh: None) -> None:
    found = coverage.coverage("0.33.0", vllm_source("0.33.0"))
    assert found.unguarded is None, found.unguarded
    assert found.summary == "vLLM 0.33.0: 6 of 6 choice sites found"
