"""Breaking jitguard on purpose, for real, in a child process (docs/failsafe.md's tests).

- ``block(modules)``: make ``import <module>`` fail with a real ModuleNotFoundError, as it does when a
  dependency is missing (``pip install --no-deps``, a vendored site dir, a half-upgraded environment);
- ``inject(probe, mode)``: make one of jitguard's fact probes raise or hang;
- ``sitecustomize_dir(tmp, ...)``: a directory for PYTHONPATH whose sitecustomize.py does both at interpreter
  start, so any command (``jitguard doctor``, a vLLM scenario) runs broken from its first import.
"""

from __future__ import annotations

import importlib
import importlib.abc
import json
import sys
import time
from pathlib import Path
from typing import Any

PROBES = ("toolchain", "packages", "gpu", "flashinfer", "link", "libstdcxx", "memory", "disk", "environment")
_MODULES = {"link": "libcuda"}  # fact name -> the jitguard.facts module whose probe() collects it


class _Blocker(importlib.abc.MetaPathFinder):
    def __init__(self, modules: set[str]) -> None:
        self.modules = modules

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> None:
        if name.split(".")[0] in self.modules:
            raise ModuleNotFoundError(f"No module named '{name}'", name=name)


def block(modules: list[str]) -> None:
    for name in list(sys.modules):
        if name.split(".")[0] in modules:
            del sys.modules[name]
    sys.meta_path.insert(0, _Blocker(set(modules)))


def inject(probe: str, mode: str) -> None:
    """Replace ``jitguard.facts.<probe>.probe`` with one that raises (``mode='raise'``) or hangs."""
    module = importlib.import_module(f"jitguard.facts.{_MODULES.get(probe, probe)}")

    def broken(*args: Any, **kwargs: Any) -> Any:
        if mode == "hang":
            time.sleep(3600)
        raise RuntimeError(f"injected fault in the {probe} probe")

    module.probe = broken  # type: ignore[attr-defined]


SITECUSTOMIZE = """
import json, os, sys
sys.path.insert(0, {tests!r})
import breakage
spec = json.loads(os.environ.get("JITGUARD_TEST_BREAKAGE", "{{}}"))
if spec.get("block"):
    breakage.block(spec["block"])
if spec.get("inject"):
    breakage.inject(*spec["inject"])
"""


def sitecustomize_dir(directory: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "sitecustomize.py").write_text(SITECUSTOMIZE.format(tests=str(Path(__file__).parent)))
    return directory


def environ(
    block_modules: list[str] | None = None, inject_probe: tuple[str, str] | None = None
) -> dict[str, str]:
    """The variable sitecustomize reads: what to break."""
    spec: dict[str, Any] = {}
    if block_modules:
        spec["block"] = block_modules
    if inject_probe:
        spec["inject"] = list(inject_probe)
    return {"JITGUARD_TEST_BREAKAGE": json.dumps(spec)}
