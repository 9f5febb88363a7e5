"""Every command exits as the README says (0 fine, 1 a blocking finding or a failed build, 2 a usage error),
run as a real process on a host where no GDN backend can run: no GPU visible (``CUDA_VISIBLE_DEVICES=``),
no CUDA toolkit (``CUDA_HOME`` an empty directory, no ``nvcc`` on ``PATH``) and ``JITGUARD_GDN_BACKEND=
flashinfer`` (strict: no fallback to torch). The commands come from the CLI's own parser, so a new one fails
``test_every_command_has_an_expected_exit_code`` until it is given its expectation here."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from envelope_schemas import assert_valid
from jitguard.cli import build_parser

SRC = Path(__file__).resolve().parents[3] / "src"

# What each command does here, given these arguments: 1 where a blocking finding applies, 0 where the command
# has nothing to block. "{ninja}" is a real one-step ninja project.
EXPECTED: dict[tuple[str, ...], tuple[tuple[str, ...], int]] = {
    ("doctor",): ((), 1),  # flashinfer and triton are blocked
    ("build", "flashinfer-gdn"): ((), 1),  # pre-flight stops it before any compile
    ("build", "ninja"): (("{ninja}",), 0),  # a project that needs nothing of CUDA builds
    ("cache", "list"): ((), 0),
    ("cache", "clear"): (("--yes",), 0),
    ("gdn", "run"): (("--repeat", "0"), 1),  # the named backend cannot run
    ("gdn", "explain"): ((), 1),  # no backend can run the call
    # warm: 1 when nothing was restored (no snapshot for this stack in the store) or nothing could be saved (an
    # empty cache: a save of 0 files is an error that says why), 0 when shown
    ("warm", "restore"): (("--arch", "9.0", "--store", "file://{project}"), 1),
    ("warm", "save"): (("--arch", "9.0", "--store", "file://{project}", "--layers", "jitguard"), 1),
    ("warm", "show"): (("--arch", "9.0"), 0),
    ("warm", "keygen"): (("--out", "{project}/signing.key"), 0),  # a new file; an existing one: 2
    ("starts",): ((), 0),  # no start recorded yet is no failure; `--check` is (tests/real/ledger)
}


def _commands(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> dict[tuple[str, ...], bool]:
    """Every command path the parser knows -> whether it runs something (a leaf) or only groups others."""
    groups = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    found = {path: not groups}
    for group in groups:
        for name, sub in group.choices.items():
            found.update(_commands(sub, (*path, name)))
    return found


COMMANDS = _commands(build_parser())
LEAVES = sorted(path for path, leaf in COMMANDS.items() if leaf)
GROUPS = sorted(path for path, leaf in COMMANDS.items() if not leaf)


@pytest.fixture(scope="module")
def host(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, str], Path]:
    root = tmp_path_factory.mktemp("no-backend")
    (root / "no-cuda").mkdir()
    project = root / "project"
    project.mkdir()
    (project / "build.ninja").write_text("rule touch\n  command = touch $out\nbuild done.txt: touch\n")
    path = [d for d in os.environ.get("PATH", "").split(os.pathsep) if d and not (Path(d) / "nvcc").exists()]
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("JITGUARD_", "FLASHINFER_", "CUDA_", "MAX_JOBS", "PYTHONPATH"))
    }
    env.update(
        {
            "PYTHONPATH": os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")]),
            "PATH": os.pathsep.join(path),
            "CUDA_VISIBLE_DEVICES": "",
            "CUDA_HOME": str(root / "no-cuda"),
            "JITGUARD_GDN_BACKEND": "flashinfer",
            "JITGUARD_CACHE_DIR": str(root / "cache"),
            "FLASHINFER_WORKSPACE_BASE": str(root / "workspace"),
            "NO_COLOR": "1",
        }
    )
    return env, project


def _run(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [sys.executable, "-m", "jitguard", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        stdin=subprocess.DEVNULL,
    )
    assert "Traceback" not in done.stderr + done.stdout, done.stderr
    return done


def _arguments(command: tuple[str, ...], project: Path) -> list[str]:
    """The arguments EXPECTED gives ``command`` (none for a group), "{ninja}" filled in."""
    args = EXPECTED[command][0] if command in EXPECTED else ()
    return [a.format(ninja=project / "build.ninja", project=project) for a in args]


def test_every_command_has_an_expected_exit_code() -> None:
    assert set(LEAVES) == set(EXPECTED), "give each new command its expected exit code in EXPECTED"
    assert {("doctor",), ("gdn", "explain")} <= set(LEAVES)


@pytest.mark.parametrize("command", LEAVES, ids=" ".join)
def test_each_command_exits_0_or_1_as_its_findings_say(
    command: tuple[str, ...], host: tuple[dict[str, str], Path]
) -> None:
    env, project = host
    code = EXPECTED[command][1]
    done = _run(env, *command, *_arguments(command, project))
    assert done.returncode == code, f"{' '.join(command)}: {done.stdout[-2000:]}\n{done.stderr[-2000:]}"
    if code == 1 and command[0] != "warm":
        assert "gpu-none" in done.stdout + done.stderr or "nvcc-missing" in done.stdout + done.stderr


@pytest.mark.parametrize("command", LEAVES + GROUPS, ids=lambda c: " ".join(c) or "jitguard")
def test_a_bad_flag_is_a_usage_error(command: tuple[str, ...], host: tuple[dict[str, str], Path]) -> None:
    done = _run(host[0], *command, *_arguments(command, host[1]), "--no-such-flag")
    assert done.returncode == 2, done.stderr
    assert "--no-such-flag" in done.stderr


@pytest.mark.parametrize("command", GROUPS, ids=lambda c: " ".join(c) or "jitguard")
def test_a_command_group_without_its_action_is_a_usage_error(
    command: tuple[str, ...], host: tuple[dict[str, str], Path]
) -> None:
    assert _run(host[0], *command).returncode == 2


def test_a_malformed_gdn_backend_variable_is_a_usage_error_for_explain(
    host: tuple[dict[str, str], Path],
) -> None:
    env = {**host[0], "JITGUARD_GDN_BACKEND": "fastest"}
    for args in (("gdn", "explain"), ("gdn", "explain", "--json")):
        done = _run(env, *args)
        assert done.returncode == 2 and "JITGUARD_GDN_BACKEND='fastest'" in done.stderr


def test_doctor_still_reports_when_the_named_gdn_backend_cannot_run(
    host: tuple[dict[str, str], Path],
) -> None:
    done = _run(host[0], "doctor", "--json")
    payload = json.loads(done.stdout)
    assert_valid(payload)
    assert done.returncode == 1 and payload["schema"] == "jitguard.doctor/1"
    gdn = payload["gdn_prefill"]
    assert (gdn["backend"], gdn["requested"], gdn["source"]) == ("none", "flashinfer", "JITGUARD_GDN_BACKEND")
    assert payload["backends"]["torch"]["usable"] is True  # strict: torch is not tried, though it could run
    text = _run(host[0], "doctor").stdout
    assert "JITGUARD_GDN_BACKEND=flashinfer (strict): cannot run here" in text
