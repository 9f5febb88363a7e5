"""Engine proofs that passed, by the key of everything they depend on, so a later start can skip the call.

An engine proof (``integrations/proof.py``) calls a FlashInfer choice once before the engine reports ready. Its
key is built from the environment fingerprint (package versions, GPU arch and driver, toolchain) and the
digest of the packages' installed files (``facts/installed_files.py``): a start whose key has a recorded pass
runs the same code on the same GPU and driver as one that passed, so it may skip the call.

One JSON file per choice under ``<cache_dir>/proofs/``, written atomically through ``jitguard.fileio``; the
newest ``KEEP`` keys are kept (hosts that switch between a few environments). A corrupt file, or one the cache
dir's trust rules refuse, is "no pass recorded": the proof runs.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

from jitguard import fileio

SCHEMA = "jitguard.proof-passes/1"
KEEP = 8

log = logging.getLogger("jitguard.state")


class ProofPasses:
    """The recorded passes of each choice's engine proof, in ``cache_dir``."""

    def __init__(self, cache_dir: Path) -> None:
        self.cache_dir = Path(cache_dir)
        self.root = self.cache_dir / "proofs"

    def _path(self, choice: str) -> Path:
        return self.root / f"{fileio.safe_name(choice)}.json"

    def _passes(self, choice: str) -> dict[str, float]:
        data = fileio.read_json(self._path(choice), root=self.cache_dir)
        if data is None or data.get("schema") != SCHEMA or data.get("choice") != choice:
            return {}
        passes = data.get("passes")
        if not isinstance(passes, dict):
            return {}
        return {k: float(v) for k, v in passes.items() if isinstance(k, str) and fileio.is_time(v)}

    def passed(self, choice: str, key: str) -> bool:
        """Whether ``choice``'s proof passed under ``key`` before."""
        return key in self._passes(choice)

    def record(self, choice: str, key: str) -> bool:
        """Remember that ``choice``'s proof passed under ``key``; False when it cannot be written (a read-only
        or full disk: the next start proves again)."""
        passes = self._passes(choice)
        passes[key] = time.time()
        newest = dict(sorted(passes.items(), key=lambda item: item[1])[-KEEP:])
        try:
            fileio.write_json(
                self._path(choice),
                {"schema": SCHEMA, "choice": choice, "passes": newest},
                root=self.cache_dir,
            )
        except OSError as exc:
            log.info("jitguard: the pass of %s's proof is not remembered: %s", choice, exc)
            return False
        return True
