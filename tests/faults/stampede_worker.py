"""One builder of the stampede (tests/faults/test_shared_builds.py): `jitguard build ninja` once per round.

    python stampede_worker.py MANIFEST CONTROL_DIR WORKER_ID FIRST_ROUND ROUNDS

For each round from FIRST_ROUND, waits for CONTROL_DIR/go-<round>, runs the CLI in this process (the same
``main`` the ``jitguard`` script runs; one process for all rounds keeps the test's cost on two cores in
seconds) and writes its exit status to CONTROL_DIR/done-<round>-<WORKER_ID>.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from jitguard.cli import main


def run(manifest: str, control: Path, worker: str, first: int, rounds: int) -> None:
    for round_no in range(first, rounds):
        go = control / f"go-{round_no}"
        while not go.exists():
            time.sleep(0.01)
        code = main(["build", "ninja", manifest, "--jobs", "2", "--progress", "none"])
        (control / f"done-{round_no}-{worker}").write_text(str(code))


if __name__ == "__main__":
    run(sys.argv[1], Path(sys.argv[2]), sys.argv[3], int(sys.argv[4]), int(sys.argv[5]))
