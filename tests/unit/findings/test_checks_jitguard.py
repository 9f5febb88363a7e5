"""A jitguard fault says whose code raised it: jitguard's own, or a package it called into (FlashInfer, the
engine), whose error the engine meets without jitguard too."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest
from packaging.version import InvalidVersion, Version

from jitguard.config import parse_duration
from jitguard.errors import ConfigError
from jitguard.findings.checks_jitguard import fault, raised_by


def _caught(work: Callable[[], object]) -> BaseException:
    with pytest.raises(Exception) as caught:
        work()
    return caught.value


def test_an_error_raised_in_another_packages_code_names_that_package_and_place() -> None:
    exc = _caught(lambda: Version("not a version"))
    assert isinstance(exc, InvalidVersion)

    package, place = raised_by(exc) or ("", "")
    finding = fault("the FlashInfer build hook", "FlashInfer builds as it would without jitguard", exc)

    assert package == "packaging"
    assert place.startswith("packaging/version.py:") and place.endswith(" in __init__")
    fix = finding.fixes[0]
    assert "raised by packaging's own code (packaging/version.py:" in fix.text
    assert "without jitguard too" in fix.text and fix.command == "jitguard doctor"


def test_jitguards_own_error_and_the_standard_librarys_keep_the_installation_check() -> None:
    own = _caught(lambda: parse_duration("soon", name="JITGUARD_BUILD_TIMEOUT"))
    stdlib = _caught(lambda: json.loads("{"))
    assert isinstance(own, ConfigError)

    for exc in (own, stdlib):
        assert raised_by(exc) is None
        fix = fault("reading a setting", "using the default", exc).fixes[0]
        assert fix.text == "Check jitguard's own installation:" and fix.command == "jitguard doctor"


def test_a_missing_module_keeps_its_install_command_wherever_it_was_raised() -> None:
    def imports_flashinfer() -> None:  # this test module is outside jitguard: an origin is found
        raise ModuleNotFoundError("No module named 'flashinfer.jit'")

    exc = _caught(imports_flashinfer)
    assert raised_by(exc) is not None

    fix = fault("the FlashInfer build hook", "FlashInfer builds as it would without jitguard", exc).fixes[0]
    assert (fix.text, fix.command) == (
        "This needs flashinfer-python; install it:",
        "pip install flashinfer-python",
    )
