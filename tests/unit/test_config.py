"""Settings from JITGUARD_* variables: every malformed value is a ConfigError naming the variable."""

from __future__ import annotations

from pathlib import Path

import pytest

from jitguard.config import Settings, parse_duration, parse_memory_spec, parse_size
from jitguard.errors import EXIT_USAGE, ConfigError


def test_defaults_without_any_variable() -> None:
    s = Settings.from_env({})
    assert s.gdn_backend == "auto"
    assert not s.disabled
    assert s.memory_budget is None
    assert s.cache_dir == Path.home() / ".cache" / "jitguard"


def test_cache_dir_follows_xdg_cache_home(tmp_path: Path) -> None:
    assert Settings.from_env({"XDG_CACHE_HOME": str(tmp_path)}).cache_dir == tmp_path / "jitguard"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("32G", 32 * 1024**3),
        ("512M", 512 * 1024**2),
        ("6GiB", 6 * 1024**3),
        ("1024", 1024),
        ("1.5G", int(1.5 * 1024**3)),
    ],
)
def test_sizes(text: str, expected: int) -> None:
    assert parse_size(text) == expected


def test_percentage_budget_resolves_against_available() -> None:
    spec = parse_memory_spec("75%")
    assert spec.resolve(100) == 75
    assert str(spec) == "75%"


@pytest.mark.parametrize("bad", ["abc", "-1G", "12X", "", "150%", "0%", "%"])
def test_bad_memory_budget_is_a_config_error(bad: str) -> None:
    with pytest.raises(ConfigError) as info:
        Settings.from_env({"JITGUARD_MEMORY_BUDGET": bad or " "})
    assert "JITGUARD_MEMORY_BUDGET" in str(info.value)
    assert info.value.exit_code == EXIT_USAGE


@pytest.mark.parametrize(("text", "seconds"), [("90", 90.0), ("90s", 90.0), ("10m", 600.0), ("1.5h", 5400.0)])
def test_durations(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("JITGUARD_STALL_TIMEOUT", "soon"),
        ("JITGUARD_BUILD_TIMEOUT", "0"),
        ("JITGUARD_GDN_BACKEND", "cuda"),
        ("JITGUARD_GDN_VARIANTS", "some"),
        ("JITGUARD_DISABLE", "maybe"),
        ("JITGUARD_JOB_MEMORY", "lots"),
        ("JITGUARD_JOB_MEMORY", "0"),
        ("JITGUARD_MEMORY_BUDGET", "0G"),
    ],
)
def test_each_malformed_variable_names_itself_and_what_is_accepted(name: str, value: str) -> None:
    with pytest.raises(ConfigError) as info:
        Settings.from_env({name: value})
    message = str(info.value)
    assert name in message and "expected" in message


def test_gdn_variants_default_to_the_needed_instances_and_all_means_the_full_module() -> None:
    assert Settings.from_env({}).gdn_variants == "auto"
    assert Settings.from_env({"JITGUARD_GDN_VARIANTS": "ALL"}).gdn_variants == "all"


def test_cache_dir_follows_variable(tmp_path: Path) -> None:
    assert Settings.from_env({"JITGUARD_CACHE_DIR": str(tmp_path)}).cache_dir == tmp_path
