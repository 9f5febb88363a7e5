"""The plugin as vLLM finds it: an entry point in jitguard's installed metadata, harmless where vLLM is not."""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys
import textwrap

GROUP = "vllm.general_plugins"

# Loads the entry point exactly as vLLM's loader does, in a process where ``import vllm`` fails, with logging
# at DEBUG to the terminal: anything the plugin printed or logged would show. Findings are exit codes.
WITHOUT_VLLM = textwrap.dedent(
    """
    import importlib.abc, importlib.metadata, logging, sys

    class NoVllm(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name == "vllm" or name.startswith("vllm."):
                raise ModuleNotFoundError(f"No module named {name!r}", name=name)
            return None

    sys.meta_path.insert(0, NoVllm())
    logging.basicConfig(level=logging.DEBUG)
    [ep] = [e for e in importlib.metadata.entry_points(group="vllm.general_plugins") if e.name == "jitguard"]
    register = ep.load()
    if register() is not False:
        sys.exit(3)
    register()  # vLLM may call it again in the same process
    heavy = sorted(m for m in ("torch", "flashinfer", "vllm", "triton") if m in sys.modules)
    if heavy:
        sys.exit(4)
    """
)


def test_entry_point_is_in_the_installed_metadata() -> None:
    [ep] = [e for e in importlib.metadata.entry_points(group=GROUP) if e.name == "jitguard"]
    assert ep.value == "jitguard.integrations.vllm:register"
    assert ep.dist is not None and ep.dist.name == "jitguard"
    assert callable(ep.load())


def test_loading_it_without_vllm_is_silent() -> None:
    proc = subprocess.run(
        [sys.executable, "-c", WITHOUT_VLLM],
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, "", "")
