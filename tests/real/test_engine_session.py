"""``benchmarks/engine_session.py``, which bounds every engine start of tests/gpu/vllm and the engine benchmark:
a stand-in engine (a real process that logs vLLM's stage lines, starts a build in a session of its own as
jitguard's keeper does, and then hangs) is stopped at its limit, named by the stage it hung in, and leaves no
process behind."""

from __future__ import annotations

import os
import sys
import textwrap
from pathlib import Path

from benchmark_modules import load
from live_processes import read_pids, survivors

session = load("engine_session")

ENGINE = textwrap.dedent(
    """
    import subprocess, sys, time
    print("INFO [core.py:115] Initializing a V1 LLM engine (v0.24.0) with config: ...", flush=True)
    print("INFO [gpu_model_runner.py:5161] Starting to load model /tmp/m...", flush=True)
    print("INFO [gpu_model_runner.py:5256] Model loading took 0.1 GiB memory and 1.0 seconds", flush=True)
    build = subprocess.Popen(["sleep", "600"], start_new_session=True)   # a build in a session of its own
    job = subprocess.Popen(["sleep", "601"])                              # and one in the engine's session
    open(sys.argv[1], "w").write(f"{build.pid} {job.pid}")
    print("jitguard: Build of gdn_prefill_sm90 [3/66] ...", flush=True)
    time.sleep(600)
    """
)


def test_an_engine_past_its_limit_is_named_by_its_stage_and_leaves_nothing(tmp_path: Path) -> None:
    pids_file = tmp_path / "pids"
    done = session.run([sys.executable, "-c", ENGINE, str(pids_file)], os.environ, limit_s=5, poll_s=0.2)
    pids = read_pids(pids_file, 2)
    assert done.timed_out
    assert "it hung in the profile run" in done.hang()
    assert "Build of gdn_prefill_sm90 [3/66]" in done.hang()
    assert set(pids) <= set(done.killed)
    assert survivors(pids, timeout=5) == []


def test_an_engine_that_serves_reports_its_numbers(tmp_path: Path) -> None:
    lines = "print('BENCH READY 1.0'); print('BENCH TTFT 0.25'); print('BENCH GENERATED 8')"
    done = session.run([sys.executable, "-c", lines], os.environ, limit_s=60)
    assert (done.status, done.stage, done.ttft_s, done.generated) == (0, "done", 0.25, 8)
