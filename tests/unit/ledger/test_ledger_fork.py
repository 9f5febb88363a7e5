"""A process forked from an engine start carries the start on: vLLM forks its engine core by default
(``VLLM_WORKER_MULTIPROC_METHOD=fork``), and the forked child loads no plugin again, so without this the
process where everything compiles kept no ledger. A real fork through multiprocessing, as vLLM makes it, in a
process of its own (never a fork of the test runner)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

SCRIPT = r"""
import json, multiprocessing, os, sys
from pathlib import Path
from jitguard.ledger import history, start, tally
from jitguard.ledger.record import Warm

cache = Path(sys.argv[1])
parent = start.begin("vllm", import_s=0.25)
parent.phase("restore", 1.5)
parent.set_warm(Warm("require", "restored", "default", ("triton",)))

def engine_core():
    tally.count("triton", "compiled", what="add_kernel")
    tally.count("triton", "cached", n=3)
    start.ready("engine-core", cache_dir=cache)

child = multiprocessing.get_context("fork").Process(target=engine_core)
child.start()
child.join()
(joined,) = history.read_starts(cache)
(record,) = joined.processes
print("RESULT " + json.dumps({
    "exit": child.exitcode, "child_pid": child.pid, "parent_pid": os.getpid(),
    "pid": record.pid, "start_id": record.start_id, "parent_start_id": parent.record.start_id,
    "phases": dict(record.phases), "parent_phases": dict(tally.current().record.phases),
    "compiled": record.layers["triton"].compiled, "cached": record.layers["triton"].cached,
    "misses": [m.what for m in record.misses],
    "started_at_kept": abs(record.started_at - parent.record.started_at) < 0.01,
}))
"""


def test_a_forked_engine_core_records_the_start_with_the_parents_phases(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("JITGUARD_")}
    env["JITGUARD_CACHE_DIR"] = str(tmp_path / "jg")
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(tmp_path / "jg")],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    assert done.returncode == 0 and lines, done.stdout[-2000:] + done.stderr[-3000:]
    found = json.loads(lines[-1][len("RESULT ") :])
    assert found["exit"] == 0
    assert found["pid"] == found["child_pid"] != found["parent_pid"]  # the file is the engine core's
    assert found["start_id"] == found["parent_start_id"] and found["started_at_kept"]
    assert found["phases"] == {"import": 0.25, "restore": 1.5}  # what jitguard spent before the fork
    assert found["parent_phases"] == {}  # counted once: they went with the child
    assert found["compiled"] == 1 and found["cached"] == 3
    assert found["misses"] == ["add_kernel"]  # the warm snapshot's cover went with it too
