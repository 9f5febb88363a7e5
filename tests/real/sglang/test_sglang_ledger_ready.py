"""The start ledger's ready point in each SGLang release's real source: the scheduler module jitguard watches
holds the ``Scheduler`` class with its own ``__init__``, and ``run_scheduler_process`` makes the scheduler
there (after loading the plugins), so the wrapped ``__init__`` returning is that process's ready."""

from __future__ import annotations

import re
from typing import Any

from jitguard.integrations import sglang_ready


def test_the_scheduler_the_ledger_waits_for_is_in_the_release(release: Any) -> None:
    source = (release.src / (sglang_ready.MODULE.replace(".", "/") + ".py")).read_text(encoding="utf-8")
    body = source.split(f"\nclass {sglang_ready.CLASS}(", 1)
    assert len(body) == 2, f"no class {sglang_ready.CLASS} in {sglang_ready.MODULE}"
    assert re.search(r"\n    def __init__\(", body[1].split("\nclass ", 1)[0])
    runner = source.split("\ndef run_scheduler_process(", 1)
    assert len(runner) == 2 and f"{sglang_ready.CLASS}(" in runner[1].split("\ndef ", 1)[0]
