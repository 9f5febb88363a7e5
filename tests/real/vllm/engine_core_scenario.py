"""Runs inside a vLLM test environment (.ci/install_vllm.sh): the fingerprint jitguard judges on in vLLM's
engine-core process, started the way vLLM starts it. GPU-less: no engine is built, only its processes.

The front end imports ``vllm.LLM`` (as a user's script, ``benchmarks/vllm_engine_start.py`` and
``tests/gpu/vllm`` do) and loads the plugins; the engine-core process is started with the multiprocessing
context vLLM's ``CoreEngineProcManager`` uses (``get_mp_context()``: fork by default, spawn under
``VLLM_WORKER_MULTIPROC_METHOD=spawn``, which ``vllm serve`` sets), imports vLLM's engine core, loads the
plugins as ``EngineCore.__init__`` does, and asks jitguard's plugin for the facts every choice is judged on.

Usage: ``python engine_core_scenario.py SPEC_JSON`` (no keys are read); prints one ``RESULT {json}`` line:
``method`` (the start method), ``registered``, ``fingerprint`` (the engine core's), ``gdn_records`` (the
recorded failures of FlashInfer's GDN modules its GDN prefill verdict sees, as findings) and
``ld_library_path`` (the value each process ended up with).
"""

from __future__ import annotations

import json
import os
from multiprocessing.queues import Queue
from typing import Any


def engine_core(queue: Queue[dict[str, Any]]) -> None:
    import vllm.v1.engine.core  # noqa: F401  (what the engine-core process runs)
    from vllm.plugins import load_general_plugins

    load_general_plugins()
    from jitguard.decision.engine_verdicts import GDN_PREFILL
    from jitguard.integrations import vllm as plugin
    from jitguard.status.engine_choices import recorded_failures

    facts = plugin.engine_facts().get()
    queue.put(
        {
            "registered": plugin.is_registered(),
            "fingerprint": facts.fingerprint,
            # the failures of FlashInfer's GDN modules that its GDN prefill verdict takes into account
            "gdn_records": [
                f.to_json() for f in recorded_failures(facts, GDN_PREFILL, plugin.guard().settings.cache_dir)
            ],
            "engine_core_ld_library_path": os.environ.get("LD_LIBRARY_PATH"),
        }
    )


def main() -> None:
    before = os.environ.get("LD_LIBRARY_PATH")
    from vllm import LLM  # noqa: F401  (the front end)
    from vllm.plugins import load_general_plugins
    from vllm.utils.system_utils import get_mp_context

    load_general_plugins()
    context = get_mp_context()
    queue = context.Queue()
    process = context.Process(target=engine_core, args=(queue,), name="EngineCore")
    process.start()
    try:
        found = queue.get(timeout=240)
    finally:
        process.join(60)
        if process.is_alive():
            process.kill()
    engine_core_value = found.pop("engine_core_ld_library_path")
    result = {
        "method": context.get_start_method(),
        **found,
        "ld_library_path": {
            "started_with": before,
            "front_end": os.environ.get("LD_LIBRARY_PATH"),
            "engine_core": engine_core_value,
        },
    }
    print("RESULT " + json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
