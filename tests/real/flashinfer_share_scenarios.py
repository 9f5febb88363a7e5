"""Scenarios for tests/real/test_flashinfer_share.py: one "host" per process with the REAL flashinfer 0.6.6
and jitguard's hook installed. Prints one JSON object on its last stdout line.

    python flashinfer_share_scenarios.py SOURCE
"""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path
from typing import Any


def load_module(source: str) -> dict[str, Any]:
    """``build_and_load`` a one-kernel module through the hook, then once more through ``build_spec``."""
    records: list[str] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if record.levelno >= logging.WARNING:
                records.append(record.getMessage())

    logging.getLogger("jitguard").addHandler(Collect())
    import jitguard

    jitguard.install()
    from flashinfer.jit import core

    from jitguard.flashinfer_jit.flashinfer_build import build_spec

    spec = core.gen_jit_spec("jitguard_share_tiny", [Path(source)])
    loaded = spec.build_and_load()
    again = build_spec(spec, load=spec.load)
    return {
        "loaded": type(loaded).__name__,
        "so": str(spec.jit_library_path),
        "objects": sorted(p.name for p in Path(spec.build_dir).glob("*.o")),
        "again": again.status,
        "again_shared": [o.to_json() for o in again.shared],
        "warnings": records,
    }


if __name__ == "__main__":
    print(json.dumps(load_module(sys.argv[1])))
