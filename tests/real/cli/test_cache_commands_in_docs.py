"""The `jitguard cache` commands README.md and docs/*.md show, run as written against a real cache dir whose
records the real code paths made on this GPU-less host (no libcuda: every FlashInfer build stops at
pre-flight, in about a second, and is recorded):

- the GDN op's first use of FlashInfer (its real ``load`` and ``prepare``: the module of the call's instance
  built through jitguard's hook), which leaves the op's record and the hook's record of that module;
- ``jitguard build flashinfer-gdn`` (FlashInfer's full module ``gdn_prefill_sm90``);
- an engine's FlashInfer ``sampling`` module built through the hook.

Each command must act: ``list`` names the records, ``clear`` removes those it names and no others, and the op
then really tries FlashInfer again (a build, not the failure cache's answer). And the fingerprints they show
are the ones README.md "Fingerprints" describes: ``doctor``'s is the one ``cache list`` marks ``here``.
"""

from __future__ import annotations

import json
import os
import pty
import re
import shlex
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from flashinfer_066 import NEEDS_FLASHINFER_066, SAMPLING_BUILD
from jitguard.state.failure_cache import FailureCache

pytestmark = NEEDS_FLASHINFER_066

ROOT = Path(__file__).resolve().parents[3]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
OP = "gdn-prefill/flashinfer"
FULL = "gdn_prefill_sm90"
PARTIAL = "gdn_prefill_sm90_only_bf16_g0b1a1i1"  # bf16, Hv == Hq, beta, alpha, an initial state
GDN_GROUP = {OP, FULL, PARTIAL}

# The op's first use as the dispatcher makes it (jitguard.gdn.dispatch: load, prepare, then on a failure
# classify_exception and BackendStatuses.record_failure), with the real FlashInfer backend on CPU tensors: its
# build stage needs no GPU, and here it fails at pre-flight.
FIRST_USE = textwrap.dedent(
    """
    import json
    import torch
    import jitguard

    jitguard.install()
    from jitguard.findings.classify import classify_exception
    from jitguard.gdn.backends import flashinfer as backend
    from jitguard.gdn.call import GdnCall
    from jitguard.status.gdn_backends import BackendStatuses

    q = torch.zeros(4, 2, 128, dtype=torch.bfloat16)
    g = torch.zeros(4, 2)
    call = GdnCall(q, q, q, g, g, torch.tensor([0, 4]), 1.0, initial_state=torch.zeros(1, 2, 128, 128))
    try:
        backend.load()
        backend.prepare(call)
        print(json.dumps(None))
    except Exception as exc:
        found = classify_exception(backend.NAME, backend.TITLE, "load", exc, alternative="triton", facts=None)
        BackendStatuses().record_failure(backend, found, getattr(exc, "log_path", None))
        print(json.dumps({"type": type(exc).__name__, "module": getattr(exc, "module", None)}))
    """
)
# Every command the docs show, as this file runs it; a module name in a template ({module}, NAME, <module>)
# reads NAME. A command the docs add fails test_every_cache_command_the_docs_show_is_run_here until a test
# here runs it.
RUN = {
    "jitguard cache list",
    "jitguard cache list --json",
    "jitguard cache list --module gdn_prefill_sm90",
    "jitguard cache clear",
    "jitguard cache clear --json",
    "jitguard cache clear --yes",
    "jitguard cache clear --module NAME --yes",
    "jitguard cache clear --module gdn-prefill/flashinfer --yes",
    "jitguard cache clear --module sampling --yes",
}
# Mentions of the command group, not commands: `jitguard cache`, `jitguard cache list|clear`.
_MENTION = re.compile(r"^jitguard cache( \S+\|\S+)?$")
_TEMPLATE = re.compile(r"\{module\}|<module>|\bNAME\b")


def documented() -> dict[str, list[str]]:
    """Each `jitguard cache ...` command in the docs (templates as NAME) -> where it is shown."""
    found: dict[str, list[str]] = {}
    for doc in DOCS:
        for number, line in enumerate(doc.read_text().splitlines(), 1):
            for command in re.findall(r"`(jitguard cache[^`]*)`", line):
                if not _MENTION.match(command):
                    found.setdefault(_TEMPLATE.sub("NAME", command), []).append(f"{doc.name}:{number}")
    return found


def _env(cache: Path, workspace: Path) -> dict[str, str]:
    """The environment of every process here: the cache dir ``cache`` and one FlashInfer ``workspace`` (a
    FLASHINFER_* variable is part of the fingerprint: a copied record applies only with the same one)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JITGUARD_", "FLASHINFER_", "MAX_JOBS"))}
    env.pop("CUDA_HOME", None)  # as the machine is: no libcuda, no libcudart on FlashInfer's link line
    env.update(
        {
            "JITGUARD_CACHE_DIR": str(cache),
            "FLASHINFER_CUDA_ARCH_LIST": "9.0a",  # what `jitguard build flashinfer-gdn` sets: one fingerprint
            "FLASHINFER_WORKSPACE_BASE": str(workspace),
            "NO_COLOR": "1",
        }
    )
    return env


def _python(script: str, env: dict[str, str]) -> Any:
    done = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def jitguard(
    command: str, env: dict[str, str], *, answer: str | None = None
) -> subprocess.CompletedProcess[str]:
    """``command`` as a user types it. With ``answer``, on a terminal that answers the question with it."""
    argv = [sys.executable, "-m", "jitguard", *shlex.split(command)[1:]]
    if answer is None:
        return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=180)
    leader, follower = pty.openpty()
    try:
        os.write(leader, answer.encode())
        return subprocess.run(argv, env=env, stdin=follower, capture_output=True, text=True, timeout=180)
    finally:
        os.close(leader)
        os.close(follower)


def modules(env: dict[str, str]) -> set[str]:
    return {r.module for r in FailureCache(Path(env["JITGUARD_CACHE_DIR"])).entries()}


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The records, made once by the real code paths; each test works on a copy of this cache dir."""
    root = tmp_path_factory.mktemp("made")
    env = _env(root / "cache", root / "workspace")
    first = _python(FIRST_USE, env)
    again = _python(FIRST_USE, env)  # the hook answers from the failure cache now
    built = jitguard("jitguard build flashinfer-gdn", env)
    sampler = _python(SAMPLING_BUILD, env)  # an engine's sampler
    return {"env": env, "first": first, "again": again, "built": built, "sampler": sampler}


@pytest.fixture
def env(made: dict[str, Any], tmp_path: Path) -> dict[str, str]:
    """``made``'s environment with a copy of its cache dir."""
    shutil.copytree(made["env"]["JITGUARD_CACHE_DIR"], tmp_path / "cache", symlinks=True)
    return {**made["env"], "JITGUARD_CACHE_DIR": str(tmp_path / "cache")}


def test_every_cache_command_the_docs_show_is_run_here() -> None:
    shown = documented()
    assert "jitguard cache clear --module gdn-prefill/flashinfer --yes" in shown  # the reader finds them
    untested = {command: where for command, where in shown.items() if command not in RUN}
    assert untested == {}, f"documented `jitguard cache` commands no test runs: {untested}"


def test_the_real_paths_record_under_the_names_the_docs_give(made: dict[str, Any]) -> None:
    assert made["first"] == {"type": "BuildFailed", "module": PARTIAL}  # pre-flight: no libcuda
    assert made["again"] == {"type": "CachedBuildFailure", "module": PARTIAL}
    assert made["built"].returncode == 1 and FULL in made["built"].stderr
    assert made["sampler"]["type"] == "BuildFailed"
    assert modules(made["env"]) == GDN_GROUP | {"sampling"}


def test_cache_list_names_every_record(env: dict[str, str]) -> None:
    listed = jitguard("jitguard cache list", env)
    assert listed.returncode == 0, listed.stderr
    for name in GDN_GROUP | {"sampling"}:
        assert name in listed.stdout
    as_json = json.loads(jitguard("jitguard cache list --json", env).stdout)
    assert {e["module"] for e in as_json["entries"]} == GDN_GROUP | {"sampling"}


def test_cache_list_module_shows_the_records_that_go_together(env: dict[str, str]) -> None:
    listed = jitguard("jitguard cache list --module gdn_prefill_sm90", env)
    assert listed.returncode == 0, listed.stderr
    assert all(name in listed.stdout for name in GDN_GROUP)
    assert "sampling" not in listed.stdout
    assert "go together" in listed.stdout


def test_clearing_the_op_by_its_name_forgets_its_modules_too_and_the_op_builds_again(
    env: dict[str, str],
) -> None:
    cleared = jitguard("jitguard cache clear --module gdn-prefill/flashinfer --yes", env)
    assert cleared.returncode == 0, cleared.stderr
    assert f"{OP} (1), {FULL} (1), {PARTIAL} (1)" in cleared.stdout  # which records matched
    assert modules(env) == {"sampling"}
    # Tried again for real: the build's own pre-flight answers, not the failure cache.
    assert _python(FIRST_USE, env) == {"type": "BuildFailed", "module": PARTIAL}


@pytest.mark.parametrize("name", sorted(GDN_GROUP))
def test_clear_module_name_with_any_name_cache_list_shows_forgets_the_group(
    env: dict[str, str], name: str
) -> None:
    command = "jitguard cache clear --module NAME --yes".replace("NAME", shlex.quote(name))
    cleared = jitguard(command, env)
    assert cleared.returncode == 0, cleared.stderr
    assert "Removed 3 cached outcome(s)" in cleared.stdout
    assert modules(env) == {"sampling"}


def test_the_fix_of_each_cached_failure_finding_runs_as_written(env: dict[str, str]) -> None:
    """docs/findings.md's `jitguard cache clear --module {module} --yes`, with the module the finding names."""
    doctor = json.loads(jitguard("jitguard doctor --engine vllm --json", env).stdout)
    fixes = {
        fix["command"]
        for finding in _findings(doctor)
        if finding["code"] in ("gdn-cached-failure", "flashinfer-cached-failure")
        for fix in finding["fixes"]
        if fix["command"] and fix["command"].startswith("jitguard cache clear")
    }
    assert f"jitguard cache clear --module {OP} --yes" in fixes
    assert "jitguard cache clear --module sampling --yes" in fixes  # docs/vllm.md's command
    for command in sorted(fixes):
        assert jitguard(command, env).returncode == 0
    assert modules(env) == set()


def test_clear_module_sampling_forgets_that_module_alone(env: dict[str, str]) -> None:
    cleared = jitguard("jitguard cache clear --module sampling --yes", env)
    assert cleared.returncode == 0, cleared.stderr
    assert "sampling (1)" in cleared.stdout
    assert modules(env) == GDN_GROUP


def test_clear_yes_forgets_every_record(env: dict[str, str]) -> None:
    cleared = jitguard("jitguard cache clear --yes", env)
    assert cleared.returncode == 0, cleared.stderr
    assert "Removed 4 cached outcome(s)" in cleared.stdout
    assert modules(env) == set()


@pytest.mark.parametrize("command", ["jitguard cache clear", "jitguard cache clear --json"])
def test_clear_without_yes_asks_on_a_terminal_and_acts_on_the_answer(
    env: dict[str, str], command: str
) -> None:
    kept = jitguard(command, env, answer="n\n")
    assert kept.returncode == 0 and "Nothing removed" in kept.stderr
    assert len(modules(env)) == 4
    cleared = jitguard(command, env, answer="y\n")
    assert cleared.returncode == 0, cleared.stderr
    assert modules(env) == set()
    if command.endswith("--json"):
        assert json.loads(cleared.stdout)["removed_outcomes"] == 4


def _findings(node: Any) -> list[dict[str, Any]]:
    """Every finding anywhere in a JSON document."""
    if isinstance(node, dict):
        own = [node] if {"code", "fixes"} <= set(node) else []
        return own + [f for value in node.values() for f in _findings(value)]
    if isinstance(node, list):
        return [f for value in node for f in _findings(value)]
    return []


def test_doctor_shows_the_fingerprint_cache_list_marks_here_and_each_says_which_it_is(
    env: dict[str, str],
) -> None:
    doctor = jitguard("jitguard doctor --json", env)
    here = json.loads(doctor.stdout)["fingerprint"]
    listed = json.loads(jitguard("jitguard cache list --json", env).stdout)
    assert listed["fingerprint"] == here
    assert all(e["this_environment"] and e["fingerprint"] == here for e in listed["entries"])
    text = jitguard("jitguard doctor", env).stdout
    assert re.search(rf"^fingerprint +{here} \(this environment's: the failure cache's key", text, re.M)
    table = jitguard("jitguard cache list", env).stdout
    assert f"this environment's is {here}, as `jitguard doctor` shows it" in table


def test_a_build_in_another_environment_records_under_its_own_fingerprint_and_says_why(
    env: dict[str, str], tmp_path: Path
) -> None:
    built = jitguard(f"jitguard build flashinfer-gdn --workspace {tmp_path / 'elsewhere'}", env)
    assert built.returncode == 1  # pre-flight, as before, now under FLASHINFER_WORKSPACE_BASE=elsewhere
    listed = json.loads(jitguard("jitguard cache list --json", env).stdout)
    elsewhere = [e for e in listed["entries"] if not e["this_environment"]]
    assert [e["module"] for e in elsewhere] == [FULL]
    assert elsewhere[0]["fingerprint"] != listed["fingerprint"]
    table = jitguard("jitguard cache list", env).stdout
    assert re.search(rf"{FULL} .*{elsewhere[0]['fingerprint']} .* no ", table), table
    assert "`jitguard build flashinfer-gdn` sets FLASHINFER_CUDA_ARCH_LIST" in table
