"""Every JITGUARD_* variable is read through one table (``jitguard.config.VARIABLES``): src/ reads none that
the table lacks, each read checks its value, README.md's "Settings" is generated from the table, and
`jitguard doctor` names every malformed or unknown one, run as a real process."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from envelope_schemas import assert_valid
from jitguard import config
from jitguard.config import VARIABLES, Settings, read
from jitguard.errors import EXIT_USAGE, ConfigError

ROOT = Path(__file__).resolve().parents[3]
NAME = re.compile(r"\bJITGUARD_[A-Z0-9_]*[A-Z0-9]\b")
# Read from another process's environment (/proc/<pid>/environ), or written for a child: not this process's reads.
# fleet/ and integrations/warm_start.py read some of theirs directly (fleet is another engineer's room).
DIRECT_READERS = ("fleet/compiler_cache.py", "fleet/compiler_cache_launch.py", "supervise/slots.py")


def test_every_jitguard_name_in_src_is_in_the_table() -> None:
    named = {
        name
        for path in (ROOT / "src" / "jitguard").rglob("*.py")
        for name in NAME.findall(path.read_text(encoding="utf-8"))
    }
    assert named - set(VARIABLES) == set(), "add each new JITGUARD_* variable to jitguard.config.VARIABLES"


def test_no_jitguard_variable_is_read_from_os_environ_outside_the_table() -> None:
    # A name in quotes, or one of the *_ENV constants that hold JITGUARD_* names.
    reads = re.compile(r"os\.environ(?:\.get)?[\[(]\s*(?:[\"']JITGUARD_|[A-Z_]*_ENV\b)")
    offenders = [
        f"{path.relative_to(ROOT)}:{n}"
        for path in (ROOT / "src" / "jitguard").rglob("*.py")
        if path.name != "config.py" and not str(path).endswith(DIRECT_READERS)
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if reads.search(line)
    ]
    assert offenders == []


def test_every_jitguard_name_the_tests_and_ci_read_is_in_the_table() -> None:
    # Not variables: a secret-named one for the redaction tests, and the misspelling doctor is tested on.
    examples = {"JITGUARD_SECRET", "JITGUARD_GDN_BACKNED"}
    named = {
        name
        for path in [*(ROOT / "tests").rglob("*.py"), *(ROOT / ".ci").iterdir()]
        if path.is_file()
        for name in NAME.findall(path.read_text(encoding="utf-8", errors="replace"))
    }
    assert named - set(VARIABLES) - examples == set()


def test_everything_the_tests_prepare_moves_with_jitguard_ci_root() -> None:
    """/tmp/jitguard-ci is written once, as JITGUARD_CI_ROOT's default (tests/lib/release_preparation.py, and in
    each .ci script as ${JITGUARD_CI_ROOT:-/tmp/jitguard-ci}); every other root derives from it."""
    places = [
        f"{path.relative_to(ROOT)}: {line.strip()}"
        for path in [*(ROOT / "tests").rglob("*.py"), *(ROOT / ".ci").iterdir()]
        if path.is_file() and path.name != "test_variables.py"
        for line in path.read_text(encoding="utf-8", errors="replace").splitlines()
        if "/tmp/jitguard-ci" in line and not line.lstrip().startswith("#")
    ]
    allowed = (
        'or "/tmp/jitguard-ci")',
        "${JITGUARD_CI_ROOT:-/tmp/jitguard-ci}",
        "``JITGUARD_CI_ROOT``, /tmp/",
    )
    assert [p for p in places if not any(a in p for a in allowed)] == []
    assert VARIABLES["JITGUARD_CI_ROOT"].default == "`/tmp/jitguard-ci`"


def test_the_readme_settings_table_is_generated_from_the_table() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert config.rewrite(readme) == readme, "regenerate it: python -m jitguard.config README.md"
    for name, variable in VARIABLES.items():
        if variable.scope != "internal":
            assert f"`{name}`" in readme, f"{name} is not documented in README.md"


@pytest.mark.parametrize(
    ("name", "bad"),
    [
        ("JITGUARD_CGROUP", "v3"),
        ("JITGUARD_DISABLE", "maybe"),
        ("JITGUARD_GDN_BACKEND", "fastest"),
        ("JITGUARD_BUILD_TIMEOUT", "soon"),
        ("JITGUARD_BUILD_TIMEOUT", "0"),
        ("JITGUARD_MEMORY_BUDGET", "lots"),
        ("JITGUARD_WARM_NAME", "a b"),
        ("JITGUARD_WARM_ARCH", "hopper"),
        ("JITGUARD_SHARE", "file://relative/dir"),
        ("JITGUARD_SHARE", "relative/dir"),
        ("JITGUARD_SHARE", "s3://"),
    ],
)
def test_a_bad_value_names_the_variable_and_what_it_accepts(name: str, bad: str) -> None:
    with pytest.raises(ConfigError) as info:
        Settings.from_env({name: bad})
    assert info.value.exit_code == EXIT_USAGE
    text = str(info.value)
    assert name in text and repr(bad) in text and "expected" in text


def test_a_file_url_with_a_host_is_refused_with_the_absolute_form() -> None:
    with pytest.raises(ConfigError) as info:
        read("JITGUARD_SHARE", {"JITGUARD_SHARE": "file://relative/dir"})
    assert "file:///relative/dir" in str(info.value) and "host name" in str(info.value)
    for good in ("file:///shared/jitguard", "file://localhost/shared", "s3://bucket/prefix", "gs://b/p"):
        assert read("JITGUARD_SHARE", {"JITGUARD_SHARE": good}) == good


def test_every_setting_parses_its_documented_default_or_an_accepted_example() -> None:
    from jitguard.findings.checks_config import _example

    for name, variable in VARIABLES.items():
        value = variable.choices[0] if variable.choices else _example(variable)
        read(name, {name: value})  # does not raise
    # An empty value reads as unset, but for the trusted keys: a blank list is refused where it is parsed
    # (fleet.signing), never taken for "no keys", which would accept any manifest.
    blank = {name: "" for name in VARIABLES if name != "JITGUARD_TRUSTED_KEYS"}
    assert Settings.from_env({}) == Settings.from_env(blank)
    assert Settings.from_env({"JITGUARD_TRUSTED_KEYS": ""}).trusted_keys == ""


def _doctor(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("JITGUARD_")}
    return subprocess.run(
        [sys.executable, "-m", "jitguard", "doctor", "--backend", "torch", *args],
        env={**clean, "NO_COLOR": "1", **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_doctor_names_every_malformed_variable_at_once_with_its_fix() -> None:
    done = _doctor({"JITGUARD_CGROUP": "v3", "JITGUARD_WARM_NAME": "a b"}, "--json")
    assert done.returncode == 2, done.stderr
    payload = json.loads(done.stdout)
    assert_valid(payload)
    findings = payload["error"]["findings"]
    assert [f["code"] for f in findings] == ["config-invalid", "config-invalid"]
    cgroup = next(f for f in findings if "JITGUARD_CGROUP" in f["title"])
    assert "auto, v2, freezer, off" in cgroup["cause"]
    assert [x["command"] for x in cgroup["fixes"]] == ["unset JITGUARD_CGROUP", "export JITGUARD_CGROUP=auto"]
    assert "JITGUARD_CGROUP='v3'" in done.stderr and "JITGUARD_WARM_NAME='a b'" in done.stderr


def test_doctor_warns_about_a_misspelt_variable_and_names_the_real_one() -> None:
    done = _doctor({"JITGUARD_GDN_BACKNED": "torch"})
    assert done.returncode == 0, done.stderr
    assert "config-unknown" in done.stdout
    assert 'export JITGUARD_GDN_BACKEND="$JITGUARD_GDN_BACKNED" && unset JITGUARD_GDN_BACKNED' in done.stdout
