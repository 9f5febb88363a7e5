"""docs/failsafe.md: jitguard broken on purpose, for real, in a child process. Each runtime dependency made
unimportable, each fact probe made to raise: no traceback, no false "passed", the fix named."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import breakage

DEPENDENCIES = {"elftools": "pyelftools", "psutil": "psutil", "packaging": "packaging", "rich": "rich"}


def run(tmp_path: Path, args: list[str], **breaks: Any) -> subprocess.CompletedProcess[str]:
    site = breakage.sitecustomize_dir(tmp_path / "site")
    env = {k: v for k, v in os.environ.items() if not k.startswith("JITGUARD_")}
    env.update(breakage.environ(**breaks))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(site), env.get("PYTHONPATH", "")) if p)
    env["JITGUARD_CACHE_DIR"] = str(tmp_path / "cache")
    env["FLASHINFER_WORKSPACE_BASE"] = str(tmp_path / "workspace")
    env["FLASHINFER_CUDA_ARCH_LIST"] = "9.0a"
    return subprocess.run(
        [sys.executable, *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        stdin=subprocess.DEVNULL,
    )


STATUS = """
import json
from jitguard.facts import collect
from jitguard.gdn.dispatch import backend_status
facts = collect()
status = backend_status("flashinfer")
print("RESULT " + json.dumps({"unavailable": dict(facts.unavailable), "usable": status.usable,
      "verified": status.verified, "codes": [f.code for f in status.findings]}))
"""


def status(tmp_path: Path, **breaks: Any) -> dict[str, Any]:
    done = run(tmp_path, ["-c", STATUS], **breaks)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr[-3000:]
    (line,) = [x for x in done.stdout.splitlines() if x.startswith("RESULT ")]
    return dict(json.loads(line[len("RESULT ") :]))


@pytest.mark.parametrize("module", sorted(DEPENDENCIES))
def test_doctor_without_a_dependency_names_it_and_its_fix_without_a_traceback(
    tmp_path: Path, module: str
) -> None:
    done = run(tmp_path, ["-m", "jitguard", "doctor"], block_modules=[module])
    output = done.stdout + done.stderr
    assert "Traceback" not in output, output[-3000:]
    assert done.returncode == 1  # jitguard itself needs repair
    assert "jitguard-dependency-missing" in output and f"pip install '{DEPENDENCIES[module]}>=" in output


def test_doctor_json_without_pyelftools_reports_the_install_and_the_unknown_fact(tmp_path: Path) -> None:
    done = run(tmp_path, ["-m", "jitguard", "doctor", "--json"], block_modules=["elftools"])
    payload = json.loads(done.stdout)
    assert [f["code"] for f in payload["installation"]["findings"]] == ["jitguard-dependency-missing"]
    assert "elftools" in payload["unavailable_facts"]["libstdcxx"]
    flashinfer = payload["backends"]["flashinfer"]["findings"]
    unknown = [f for f in flashinfer if f["code"] == "fact-unavailable"]
    assert unknown and unknown[0]["fixes"][0]["command"] == "pip install 'pyelftools>=0.30'"


def test_without_pyelftools_the_link_verdict_still_stands_and_nothing_is_verified(tmp_path: Path) -> None:
    """The field case of issue 17: pyelftools missing, -lcuda unlinkable. Before, FlashInfer 'passed'."""
    got = status(tmp_path, block_modules=["elftools"])
    assert "libstdcxx" in got["unavailable"]
    assert "link-missing-libcuda" in got["codes"] and not got["usable"]
    assert not got["verified"] and "fact-unavailable" in got["codes"]


@pytest.mark.parametrize("probe", breakage.PROBES)
def test_a_probe_that_raises_is_one_unavailable_fact_never_a_crash_or_a_pass(
    tmp_path: Path, probe: str
) -> None:
    got = status(tmp_path, inject_probe=(probe, "raise"))
    assert probe in got["unavailable"] and "injected fault" in got["unavailable"][probe]
    assert not (got["usable"] and got["verified"])  # never "passed" on a check that could not run
    done = run(tmp_path, ["-m", "jitguard", "doctor", "--json"], inject_probe=(probe, "raise"))
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    assert probe in json.loads(done.stdout)["unavailable_facts"]


def test_a_command_that_needs_torch_names_it_without_a_traceback(tmp_path: Path) -> None:
    done = run(tmp_path, ["-m", "jitguard", "gdn", "run", "--repeat", "0"], block_modules=["torch"])
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr[-3000:]
    assert "No module named 'torch'" in done.stderr and "`pip install torch`" in done.stderr
    assert "jitguard-dependency-missing" not in done.stderr  # torch is the engine's, not jitguard's


def test_piped_doctor_output_has_no_padding(tmp_path: Path) -> None:
    done = run(tmp_path, ["-m", "jitguard", "doctor"])
    assert done.stdout and not [line for line in done.stdout.splitlines() if line != line.rstrip()]
