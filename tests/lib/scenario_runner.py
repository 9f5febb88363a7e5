"""The one runner of an engine scenario (vLLM's and SGLang's alike): a script, or inline code, in an
interpreter of its own, its last ``RESULT {json}`` line read back; a failed scenario fails the test with the
end of what it printed."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

TIMEOUT_S = 300


def run_scenario(
    python: Path | str, script: Path, spec: Mapping[str, Any], env: Mapping[str, str]
) -> tuple[dict[str, Any], str]:
    """Run ``script`` with ``spec`` (as JSON, its one argument) by ``python`` in ``env``; (its last RESULT,
    everything it printed)."""
    return run_python(python, [str(script), json.dumps(spec)], env)


def run_code(python: Path | str, code: str, env: Mapping[str, str]) -> dict[str, Any]:
    """Run inline ``code`` (``python -c``) in ``env``; its last RESULT."""
    return run_python(python, ["-c", code], env)[0]


def run_python(python: Path | str, args: Sequence[str], env: Mapping[str, str]) -> tuple[dict[str, Any], str]:
    proc = subprocess.run(
        [str(python), *args],
        env=dict(env),
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        stdin=subprocess.DEVNULL,
    )
    output = proc.stdout + proc.stderr
    results = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    assert proc.returncode == 0 and results, f"scenario failed (exit {proc.returncode}):\n{output[-6000:]}"
    return json.loads(results[-1][len("RESULT ") :]), output
