"""Runs inside an SGLang test environment (.ci/install_sglang.sh) of a release that keeps its process-wide
linear-attention choice in a dict (0.5.17: ``_BACKENDS``, with a verify phase): SGLang's own ``load_plugins()``
loads jitguard and applies its hooks, then SGLang's real ``initialize_linear_attn_config(server_args,
prefill_default)`` runs once per entry of SPEC's ``runs`` as its attention registry calls it in a scheduler,
followed by the getters the GDN backend reads.

``server_args`` holds the linear-attention options as SGLang's ``ServerArgs`` has them after its own
resolution: a real ``ServerArgs`` cannot be built on a machine without CUDA for these releases (their model
config imports FlashInfer 0.6.15, whose GDN decode module asks the CUDA device for its SM count at import).

Usage: ``python process_table_scenario.py SPEC_JSON`` with runs ``[{"options": {...}, "prefill_default":
"flashinfer" | null}]``; prints the log, then one ``RESULT {json}`` line."""

from __future__ import annotations

import importlib
import json
import os
import sys
from types import SimpleNamespace
from typing import Any

UTILS = "sglang.srt.layers.attention.linear.utils"
OPTIONS = (
    "linear_attn_backend",
    "linear_attn_prefill_backend",
    "linear_attn_decode_backend",
    "linear_attn_verify_backend",
)


def choose(utils: Any, run: dict[str, Any]) -> dict[str, Any]:
    args = SimpleNamespace(**{name: None for name in OPTIONS})
    args.linear_attn_backend = "triton"  # SGLang's default
    for name, value in run.get("options", {}).items():
        setattr(args, name, value)
    out: dict[str, Any] = {"error": None}
    try:
        utils.initialize_linear_attn_config(args, prefill_default=run.get("prefill_default"))
    except Exception as exc:
        out["error"] = {
            "type": type(exc).__name__,
            "message": str(exc),
            "codes": [f.code for f in getattr(exc, "findings", ())],
        }
    out["backends"] = {
        "prefill": utils.get_linear_attn_prefill_backend().value,
        "decode": utils.get_linear_attn_decode_backend().value,
        "verify": utils.get_linear_attn_verify_backend().value,
    }
    return out


def main(spec: dict[str, Any]) -> dict[str, Any]:
    import sglang
    from sglang.srt.plugins import load_plugins

    from jitguard.integrations import sglang as plugin

    load_plugins()
    utils = importlib.import_module(UTILS)
    layout = plugin.installed_layout()
    result: dict[str, Any] = {
        "sglang": sglang.__version__,
        "registered": plugin.is_registered(),
        "layout": layout.name if layout else None,
        "has_table": isinstance(getattr(utils, "_BACKENDS", None), dict),
    }
    result["runs"] = [choose(utils, run) for run in spec["runs"]]
    # `jitguard doctor --engine sglang`: the layout read from SGLang's installed files, without importing it
    result["described"] = [
        [row["phase"], row["layout"]] for row in plugin.describe_choices(plugin.guard().settings.cache_dir)
    ]
    return result


if __name__ == "__main__":
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    outcome = main(json.loads(sys.argv[1]))
    sys.stdout.flush()
    print("RESULT " + json.dumps(outcome), flush=True)
