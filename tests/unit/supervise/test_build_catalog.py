"""The build area of the catalog: every agreed code, and every message names the full log."""

from __future__ import annotations

from jitguard.findings.catalog import CATALOG, make

BUILD_CODES = (
    "build-oom-killed",
    "build-timeout",
    "build-stalled",
    "disk-full",
    "build-failed",
    "lock-timeout",
    "build-interrupted",
)
PARAMS = {
    "module": "gdn_prefill_sm90",
    "log_path": "/cache/logs/gdn.log",
    "jobs": 4,
    "timeout": "3600 s",
    "stall_timeout": "600 s",
    "progress": "12/34",
    "returncode": 1,
    "signal": "SIGTERM",
    "lock_path": "/cache/gdn.lock",
    "holder": "pid 12 on host-a, 40 s",
    "waited": "3600 s",
}


def test_every_agreed_build_code_is_in_the_catalog() -> None:
    assert all(CATALOG[code].area == "build" for code in BUILD_CODES)


def test_build_findings_fill_every_field_and_name_the_log() -> None:
    for code in BUILD_CODES:
        finding = make(code, **PARAMS)
        text = " ".join([finding.title, finding.cause, *[f.render() for f in finding.fixes]])
        assert "{" not in text, (code, text)
        if code != "lock-timeout":
            assert "/cache/logs/gdn.log" in text, code
        assert finding.fixes, code
