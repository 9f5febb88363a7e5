"""Scenarios for tests/real/test_flashinfer_hook.py, each run in a fresh process with the REAL flashinfer 0.6.6.

A fresh process per scenario because FlashInfer fixes its workspace and arch at import time and the hook patches
the imported modules. Each scenario prints one JSON object on its last stdout line.

    python flashinfer_hook_scenarios.py SCENARIO [ARGS...]
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any


def _failure(exc: BaseException) -> dict[str, Any]:
    return {
        "type": type(exc).__name__,
        "codes": [f.code for f in getattr(exc, "findings", ())],
        "message": str(exc),
    }


def _patched() -> dict[str, Any]:
    from flashinfer.jit import core, cpp_ext

    original = getattr(core.JitSpec.build_and_load, "__jitguard_original__", None)
    return {
        "build_and_load": original is not None,
        "wrapped_once": original is not None and not hasattr(original, "__jitguard_original__"),
        "core_run_ninja": hasattr(core.run_ninja, "__jitguard_original__"),
        "cpp_ext_run_ninja": hasattr(cpp_ext.run_ninja, "__jitguard_original__"),
    }


def gdn_preflight() -> dict[str, Any]:
    """install() before flashinfer is imported; the GDN module fails pre-flight twice (then from the cache)."""
    import jitguard

    out: dict[str, Any] = {"install": jitguard.install()}
    out["flashinfer_imported_by_install"] = any(m.split(".")[0] == "flashinfer" for m in sys.modules)
    out["install_again"] = jitguard.install()
    from flashinfer.jit import gdn

    out["patched"] = _patched()
    out["install_after_import"] = jitguard.install()
    out["patched_after_reinstall"] = _patched()
    spec = gdn.gen_gdn_prefill_sm90_module()
    for attempt in ("first", "second"):
        try:
            spec.build_and_load()
            out[attempt] = {"type": None}
        except Exception as exc:
            out[attempt] = _failure(exc)
    out["objects"] = sorted(p.name for p in spec.build_dir.glob("*.o"))
    out["ninja_log"] = (spec.build_dir / ".ninja_log").exists()
    out["so"] = spec.jit_library_path.exists()
    out["lock_file"] = str(spec.lock_path)
    return out


def eager_install() -> dict[str, Any]:
    """flashinfer imported first, install() afterwards; uninstall() restores FlashInfer."""
    from flashinfer.jit import core

    import jitguard
    from jitguard.integrations import flashinfer_hook

    original = core.JitSpec.build_and_load
    out: dict[str, Any] = {"install": jitguard.install(), "patched": _patched()}
    out["install_again"] = jitguard.install()
    out["patched_again"] = _patched()
    flashinfer_hook.uninstall()
    out["restored"] = core.JitSpec.build_and_load is original and not _patched()["core_run_ninja"]
    return out


def disabled() -> dict[str, Any]:
    """JITGUARD_DISABLE=1: install() is a no-op; flashinfer stays stock."""
    import jitguard
    from jitguard.integrations import flashinfer_hook

    out: dict[str, Any] = {"install": jitguard.install()}
    out["finder_installed"] = any(type(f).__name__ == "_CoreImportHook" for f in sys.meta_path)
    import flashinfer.jit.core  # noqa: F401

    out["patched"] = _patched()
    out["active"] = flashinfer_hook.is_active()
    return out


def stub_libcuda(tiny_source: str, bad_source: str) -> dict[str, Any]:
    """With a link stub in FLASHINFER_EXTRA_LDFLAGS: GDN pre-flight passes (not built here: ~1 h); a tiny real
    nvcc module goes through the hooked build_and_load end to end; a broken one is classified and cached."""
    import jitguard

    jitguard.install()
    from flashinfer.jit import core, gdn

    from jitguard.flashinfer_jit.flashinfer_build import build_spec, check_before_build, facts_for
    from jitguard.state.failure_cache import FailureCache

    cache = FailureCache(Path(os.environ["JITGUARD_CACHE_DIR"]))
    facts = facts_for(dict(os.environ))
    out: dict[str, Any] = {"fingerprint": facts.fingerprint}
    gdn_spec = gdn.gen_gdn_prefill_sm90_module()
    try:
        notes = check_before_build(gdn_spec.name, facts, cache)
        out["gdn_preflight"] = {"passed": True, "notes": [f.code for f in notes]}
    except Exception as exc:
        out["gdn_preflight"] = {"passed": False, **_failure(exc)}

    from jitguard.ledger import tally

    ledger = tally.begin("vllm")  # as the engine plugins begin it: the builds below count into it
    tiny = core.gen_jit_spec("jitguard_test_tiny", [tiny_source])
    loaded = tiny.build_and_load()
    out["tiny_loaded"] = type(loaded).__name__
    out["tiny_so"] = str(tiny.jit_library_path)
    record = cache.lookup("jitguard_test_tiny", facts.fingerprint)
    out["tiny_outcome"] = record.outcome if record else None
    again = build_spec(tiny, load=tiny.load)
    out["tiny_again"] = {"status": again.status, "loaded": type(again.loaded).__name__}
    out["ledger"] = ledger.record.layers["flashinfer-nvcc"].to_json()
    out["sidecars"] = sorted(p.name for p in Path(tiny.lock_path).parent.glob("*.jitguard.json"))

    # FlashInfer's own build path (AOT scripts, JitSpec.build) calls run_ninja: the hook routes it too.
    direct = core.gen_jit_spec("jitguard_test_direct", [tiny_source])
    direct.build(False)
    logs = Path(os.environ["JITGUARD_CACHE_DIR"], "logs")
    out["direct_so"] = direct.jit_library_path.exists()
    out["direct_logs"] = len(list(logs.glob("jitguard_test_direct-*.log")))

    bad = core.gen_jit_spec("jitguard_test_bad", [bad_source])
    for attempt in ("bad_first", "bad_second"):
        try:
            bad.build_and_load()
            out[attempt] = {"type": None}
        except Exception as exc:
            out[attempt] = _failure(exc)
            out[attempt]["log_path"] = getattr(exc, "log_path", None)
    Path(bad_source).write_text(Path(tiny_source).read_text())  # the user fixes the kernel
    try:
        bad.build_and_load()
        out["bad_fixed"] = {"type": None}
    except Exception as exc:
        out["bad_fixed"] = _failure(exc)
    return out


def fault_in_hook(tiny_source: str) -> dict[str, Any]:
    """jitguard broken inside the build hook (an injected bug in build_spec; a malformed JITGUARD_* setting):
    FlashInfer's own build_and_load runs instead, one jitguard-fault warning, nothing raised into FlashInfer."""
    import logging

    import jitguard
    from jitguard.flashinfer_jit import flashinfer_build

    records: list[str] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if record.levelno >= logging.WARNING:
                records.append(record.getMessage())

    logging.getLogger("jitguard").addHandler(Collect())
    jitguard.install()
    from flashinfer.jit import core

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("injected bug in jitguard's build_spec")

    flashinfer_build.build_spec = broken  # type: ignore[assignment]
    out: dict[str, Any] = {}
    for name, env in (("injected", {}), ("malformed-setting", {"JITGUARD_MEMORY_BUDGET": "banana"})):
        os.environ.update(env)
        spec = core.gen_jit_spec(f"jitguard_test_fault_{name.replace('-', '_')}", [tiny_source])
        try:
            out[name] = {"loaded": type(spec.build_and_load()).__name__, "so": spec.jit_library_path.exists()}
            out[name]["again"] = type(spec.build_and_load()).__name__
        except Exception as exc:
            out[name] = _failure(exc)
        for key in env:
            del os.environ[key]
    out["warnings"] = records
    return out


SCENARIOS = {
    "fault-in-hook": fault_in_hook,
    "gdn-preflight": gdn_preflight,
    "eager-install": eager_install,
    "disabled": disabled,
    "stub-libcuda": stub_libcuda,
}

if __name__ == "__main__":
    result = SCENARIOS[sys.argv[1]](*sys.argv[2:])  # type: ignore[operator]
    print(json.dumps(result))
