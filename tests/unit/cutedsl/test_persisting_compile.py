"""The persisting ``cached_compile``: FlashInfer's in-memory dict first, then the kernel cache, then one compile
per host that every later process loads; never worse than FlashInfer's own compile.

FlashInfer's ``custom_compile_cache`` module is modelled here by a module object with its three names
(``cached_compile``, ``_in_mem_compile_cache``, ``_compile_options_key``, as in 0.6.14 - 0.7.4) and the DSL's
export and load by byte round trips: the real FlashInfer code is driven in tests/real/test_cutedsl_kernel_cache.py
and the real DSL export/load on the H200 (tests/gpu/test_cutedsl_kernel_cache.py)."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import textwrap
import types
from pathlib import Path
from typing import Any

import pytest

from jitguard.boundary import failsafe
from jitguard.cutedsl import kernel_key, kernel_objects, persisting_compile
from jitguard.cutedsl.kernel_cache import KernelCache

SRC = Path(__file__).resolve().parents[3] / "src"


class GPUArch:  # the DSL's option class is matched by name
    def __init__(self, value: str) -> None:
        self.value = value


class Kernel:
    """A kernel object as FlashInfer makes them: flags, a dtype, a compile key."""

    def __init__(self, needs_alpha: bool = True, dtype: str = "bf16") -> None:
        self.needs_alpha = needs_alpha
        self.needs_init_state = False
        self.dtype = dtype

    def _get_compile_key(self) -> tuple[Any, ...]:
        return ("Kernel", self.needs_alpha, self.dtype)


class Compiled:
    def __init__(self, label: bytes) -> None:
        self.label = label

    def dump_to_object(self, symbol: str) -> bytes:
        return b"OBJ:" + symbol.encode() + b":" + self.label


def flashinfer_like(compiles: list[bytes]) -> types.ModuleType:
    module = types.ModuleType("flashinfer.gdn_kernels.delta_rule_dsl.custom_compile_cache")
    module._in_mem_compile_cache = {}  # type: ignore[attr-defined]
    module._compile_options_key = lambda options: tuple((type(o).__name__, o.value) for o in options or ())  # type: ignore[attr-defined]

    def cached_compile(func: Any, *args: Any, compile_options: Any = None, **kwargs: Any) -> Any:
        key = (func._get_compile_key(), module._compile_options_key(compile_options))  # type: ignore[attr-defined]
        found = module._in_mem_compile_cache.get(key)  # type: ignore[attr-defined]
        if found is None:
            label = f"compiled-{len(compiles)}".encode()
            compiles.append(label)
            found = module._in_mem_compile_cache[key] = Compiled(label)  # type: ignore[attr-defined]
        return found

    module.cached_compile = cached_compile  # type: ignore[attr-defined]
    return module


class Loaded:
    def __init__(self, blob: bytes) -> None:
        self.blob = blob


@pytest.fixture
def dsl(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """A DSL stack, the DSL's load as a byte round trip, and a fresh cache dir."""
    monkeypatch.setenv("JITGUARD_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("JITGUARD_DISABLE", raising=False)
    monkeypatch.delenv("JITGUARD_CUTEDSL_CACHE", raising=False)
    monkeypatch.setattr(kernel_key, "dsl_stack", lambda: ("python", "nvidia-cutlass-dsl==4.6.0:abc"))
    monkeypatch.setattr(kernel_objects, "load_object", lambda entry: Loaded(entry.blob))
    monkeypatch.setattr(persisting_compile, "dsl_damage", lambda: "")
    persisting_compile._warned.clear()
    failsafe._reported.clear()
    return tmp_path / "cache"


OPTIONS = (GPUArch("sm_90a"),)


def test_the_first_process_compiles_and_keeps_every_later_one_loads(dsl: Path) -> None:
    compiles: list[bytes] = []
    first = flashinfer_like(compiles)
    assert persisting_compile.route(first)
    compiled = first.cached_compile(Kernel(), "q", "k", compile_options=OPTIONS)
    assert isinstance(compiled, Compiled) and compiles == [b"compiled-0"]
    assert first.cached_compile(Kernel(), "q", "k", compile_options=OPTIONS) is compiled  # FlashInfer's dict
    assert len(KernelCache(dsl).entries()) == 1

    later = flashinfer_like(compiles)  # a new process: FlashInfer's dict is empty
    persisting_compile.route(later)
    loaded = later.cached_compile(Kernel(), "q", "k", compile_options=OPTIONS)
    assert isinstance(loaded, Loaded) and compiles == [b"compiled-0"]  # no second compile
    assert loaded.blob.endswith(b":compiled-0")
    assert later.cached_compile(Kernel(), "q", "k", compile_options=OPTIONS) is loaded
    assert list(later._in_mem_compile_cache.values()) == [loaded]  # FlashInfer's own lookups find it


def test_each_specialisation_and_arch_is_its_own_entry(dsl: Path) -> None:
    compiles: list[bytes] = []
    module = flashinfer_like(compiles)
    persisting_compile.route(module)
    module.cached_compile(Kernel(), compile_options=OPTIONS)
    module.cached_compile(Kernel(needs_alpha=False), compile_options=OPTIONS)
    module.cached_compile(Kernel(), compile_options=(GPUArch("sm_120a"),))
    assert len(compiles) == 3
    assert len(KernelCache(dsl).entries()) == 3


def test_a_new_dsl_stack_is_a_miss(dsl: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    compiles: list[bytes] = []
    persisting_compile.route(module := flashinfer_like(compiles))
    module.cached_compile(Kernel(), compile_options=OPTIONS)
    monkeypatch.setattr(kernel_key, "dsl_stack", lambda: ("python", "nvidia-cutlass-dsl==4.8.0:def"))
    persisting_compile.route(module := flashinfer_like(compiles))
    assert isinstance(module.cached_compile(Kernel(), compile_options=OPTIONS), Compiled)
    assert len(compiles) == 2


def test_a_cute_dsl_variable_is_part_of_the_key(dsl: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    compiles: list[bytes] = []
    persisting_compile.route(module := flashinfer_like(compiles))
    module.cached_compile(Kernel(), compile_options=OPTIONS)
    monkeypatch.setenv("CUTE_DSL_ENABLE_TVM_FFI", "1")
    persisting_compile.route(module := flashinfer_like(compiles))
    module.cached_compile(Kernel(), compile_options=OPTIONS)
    assert len(compiles) == 2


@pytest.mark.parametrize("name", ["CUTE_DSL_COMPILER_OPT", "CUTE_DSL_SOME_FUTURE_SWITCH"])
def test_a_code_changing_or_unknown_cute_dsl_variable_stays_in_the_key(
    dsl: Path, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    compiles: list[bytes] = []
    persisting_compile.route(module := flashinfer_like(compiles))
    module.cached_compile(Kernel(), compile_options=OPTIONS)
    monkeypatch.setenv(name, "1")
    persisting_compile.route(module := flashinfer_like(compiles))
    module.cached_compile(Kernel(), compile_options=OPTIONS)
    assert len(compiles) == 2


def test_the_dsls_cache_dir_dump_dir_and_log_settings_are_not_in_the_key(
    dsl: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    compiles: list[bytes] = []
    monkeypatch.setenv("CUTE_DSL_CACHE_DIR", str(tmp_path / "a"))
    persisting_compile.route(module := flashinfer_like(compiles))
    module.cached_compile(Kernel(), compile_options=OPTIONS)
    monkeypatch.setenv("CUTE_DSL_CACHE_DIR", str(tmp_path / "elsewhere" / "b"))
    monkeypatch.setenv("CUTE_DSL_DUMP_DIR", str(tmp_path / "dumps"))
    monkeypatch.setenv("CUTE_DSL_LOG_LEVEL", "10")
    monkeypatch.setenv("CUTE_DSL_KEEP", "ptx")
    persisting_compile.route(module := flashinfer_like(compiles))
    assert isinstance(module.cached_compile(Kernel(), compile_options=OPTIONS), Loaded)
    assert len(compiles) == 1


def test_a_cache_dir_moved_to_another_path_hits(
    dsl: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    compiles: list[bytes] = []
    persisting_compile.route(module := flashinfer_like(compiles))
    module.cached_compile(Kernel(), compile_options=OPTIONS)
    moved = tmp_path / "other-host" / "cache"
    moved.parent.mkdir()
    dsl.rename(moved)
    monkeypatch.setenv("JITGUARD_CACHE_DIR", str(moved))
    persisting_compile.route(module := flashinfer_like(compiles))
    assert isinstance(module.cached_compile(Kernel(), compile_options=OPTIONS), Loaded)
    assert len(compiles) == 1
    entry = KernelCache(moved).entries()[0]
    assert str(tmp_path) not in json.dumps(entry["material"])  # no path in what keys a kernel


@pytest.mark.parametrize("setting", [("JITGUARD_DISABLE", "1"), ("JITGUARD_CUTEDSL_CACHE", "0")])
def test_switched_off_it_is_flashinfer_as_it_is(
    dsl: Path, monkeypatch: pytest.MonkeyPatch, setting: tuple[str, str]
) -> None:
    compiles: list[bytes] = []
    persisting_compile.route(flashinfer_like(compiles))
    monkeypatch.setenv(*setting)
    for _ in range(2):
        persisting_compile.route(module := flashinfer_like(compiles))
        assert isinstance(module.cached_compile(Kernel(), compile_options=OPTIONS), Compiled)
    assert len(compiles) == 2
    assert not (dsl / "kernels").exists()


def test_a_key_with_an_address_in_it_is_not_kept(dsl: Path) -> None:
    class Unstable(Kernel):
        def _get_compile_key(self) -> tuple[Any, ...]:
            return ("Unstable", object())

    compiles: list[bytes] = []
    persisting_compile.route(module := flashinfer_like(compiles))
    module.cached_compile(Unstable(), compile_options=OPTIONS)
    assert compiles and not (dsl / "kernels").exists()


def test_a_broken_export_or_load_is_one_warning_and_flashinfers_compile(
    dsl: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def refuse(compiled: Any, symbol: str) -> tuple[bytes, str]:
        raise RuntimeError("Error dumping object file")

    monkeypatch.setattr(kernel_objects, "export_object", refuse)
    compiles: list[bytes] = []
    with caplog.at_level(logging.WARNING, logger="jitguard"):
        for needs_alpha in (True, False):
            persisting_compile.route(module := flashinfer_like(compiles))
            assert isinstance(module.cached_compile(Kernel(needs_alpha), compile_options=OPTIONS), Compiled)
    faults = [r for r in caplog.records if "jitguard-fault" in r.getMessage()]
    assert len(faults) == 1, [r.getMessage() for r in faults]
    assert "Error dumping object file" in faults[0].getMessage()
    assert len(compiles) == 2 and KernelCache(dsl).entries() == []


def test_an_entry_that_does_not_load_is_compiled_instead(
    dsl: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    compiles: list[bytes] = []
    persisting_compile.route(module := flashinfer_like(compiles))
    module.cached_compile(Kernel(), compile_options=OPTIONS)

    def no_load(entry: Any) -> Any:
        raise OSError("libcute_dsl_runtime.so: cannot open shared object file")

    monkeypatch.setattr(kernel_objects, "load_object", no_load)
    persisting_compile.route(module := flashinfer_like(compiles))
    with caplog.at_level(logging.WARNING, logger="jitguard"):
        assert isinstance(module.cached_compile(Kernel(), compile_options=OPTIONS), Compiled)
    assert len(compiles) == 2
    assert "libcute_dsl_runtime.so" in caplog.text


def test_flashinfers_own_compile_error_reaches_the_caller_unchanged(dsl: Path) -> None:
    module = flashinfer_like([])

    def failing(func: Any, *args: Any, compile_options: Any = None, **kwargs: Any) -> Any:
        raise NotImplementedError("DSL kernel is unavailable")

    module.cached_compile = failing  # type: ignore[attr-defined]
    persisting_compile.route(module)
    with pytest.raises(NotImplementedError, match="DSL kernel is unavailable"):
        module.cached_compile(Kernel(), compile_options=OPTIONS)


def test_route_rebinds_the_name_in_flashinfer_modules_that_imported_it(
    dsl: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    module = flashinfer_like([])
    user = types.ModuleType("flashinfer.gdn_kernels.delta_rule_dsl.delta_rule_sm90")
    user.cached_compile = module.cached_compile  # type: ignore[attr-defined]  # `from .custom_compile_cache import ...`
    monkeypatch.setitem(sys.modules, user.__name__, user)
    original = module.cached_compile
    assert persisting_compile.route(module) and persisting_compile.route(module)  # idempotent
    assert user.cached_compile is module.cached_compile is not original  # type: ignore[attr-defined]
    assert persisting_compile.is_routed(module)
    persisting_compile.unroute(module)
    assert user.cached_compile is module.cached_compile is original  # type: ignore[attr-defined]


def test_a_module_laid_out_otherwise_is_left_alone(dsl: Path, caplog: pytest.LogCaptureFixture) -> None:
    module = types.ModuleType("flashinfer.gdn_kernels.delta_rule_dsl.custom_compile_cache")
    module.cached_compile = lambda *a, **k: None  # type: ignore[attr-defined]
    with caplog.at_level(logging.WARNING, logger="jitguard"):
        assert persisting_compile.route(module) is False
    assert "not laid out as jitguard knows it" in caplog.text
    assert not persisting_compile.is_routed(module)


# Ranks starting together: one compiles (slowly), the others wait for it and load.
RANK_SCRIPT = textwrap.dedent(
    """
    import sys, time, types
    sys.path.insert(0, sys.argv[1])
    from test_persisting_compile import Kernel, Loaded, OPTIONS, flashinfer_like
    from jitguard.cutedsl import kernel_key, kernel_objects, persisting_compile

    kernel_key.dsl_stack = lambda: ("python", "nvidia-cutlass-dsl==4.6.0:abc")
    kernel_objects.load_object = lambda entry: Loaded(entry.blob)
    persisting_compile.dsl_damage = lambda: ""
    compiles = []
    module = flashinfer_like(compiles)
    original = module.cached_compile
    def slow(*args, **kwargs):
        time.sleep(3)
        return original(*args, **kwargs)
    module.cached_compile = slow
    persisting_compile.route(module)
    kernel = module.cached_compile(Kernel(), compile_options=OPTIONS)
    print(type(kernel).__name__, len(compiles))
    """
)


def test_ranks_starting_together_compile_once(tmp_path: Path) -> None:
    env = {**os.environ, "JITGUARD_CACHE_DIR": str(tmp_path / "cache"), "PYTHONPATH": str(SRC)}
    env.pop("JITGUARD_DISABLE", None)
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", RANK_SCRIPT, str(Path(__file__).parent)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(4)
    ]
    results = [p.communicate(timeout=120) for p in procs]
    assert all(p.returncode == 0 for p in procs), [err for _, err in results]
    outputs = sorted(out.strip() for out, _ in results)
    assert outputs == ["Compiled 1", "Loaded 0", "Loaded 0", "Loaded 0"], outputs
    waits = "".join(err for _, err in results)
    assert "compiling the CuTeDSL kernel Kernel(bf16, alpha)" in waits  # the slow compile was said
    assert "waiting" in waits.lower()  # and so was the wait for it
    assert len(KernelCache(tmp_path / "cache").entries()) == 1


def test_nothing_is_kept_while_the_dsl_install_is_damaged(
    dsl: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(persisting_compile, "dsl_damage", lambda: "nvidia-cutlass-dsl-libs-cu13 (1 files)")
    compiles: list[bytes] = []
    with caplog.at_level(logging.WARNING, logger="jitguard"):
        persisting_compile.route(module := flashinfer_like(compiles))
        assert isinstance(module.cached_compile(Kernel(), compile_options=OPTIONS), Compiled)
    assert "not keeping CuTeDSL kernels" in caplog.text and "libs-cu13" in caplog.text
    assert KernelCache(dsl).entries() == []


def test_dsl_damage_reads_the_record_check(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The real installed DSL here is intact: nothing stops a publish. A check that finds a file the DSL
    imports missing (what cutedsl.dsl_install reports for a half-overwritten install) does."""
    from jitguard.cutedsl import dsl_install

    monkeypatch.setenv("JITGUARD_CACHE_DIR", str(tmp_path / "cache"))
    assert persisting_compile.dsl_damage() == ""
    assert (tmp_path / "cache" / dsl_install.DIGESTS_FILE).is_file()  # kept for the next process
    broken = dsl_install.DistCheck(
        name="nvidia-cutlass-dsl-libs-cu13",
        version="4.6.0",
        location="/site",
        files_checked=14,
        missing=("nvidia_cutlass_dsl/cu13/lib/libcute_dsl_runtime.so",),
        differ=(),
        unreadable=(),
        shares_paths_with=(),
    )
    monkeypatch.setattr(dsl_install, "probe", lambda **_: dsl_install.DslInstallFacts((broken,), 0, 0.0))
    assert persisting_compile.dsl_damage() == "nvidia-cutlass-dsl-libs-cu13 (1 files)"


# ---- the fleet: one host compiles and publishes, another fetches ------------------------------------------
def _on_host(monkeypatch: pytest.MonkeyPatch, cache: Path, store: Path, *, publish: bool) -> None:
    monkeypatch.setenv("JITGUARD_CACHE_DIR", str(cache))
    monkeypatch.setenv("JITGUARD_SHARE", f"file://{store}")
    monkeypatch.setenv("JITGUARD_SHARE_PUBLISH", "1" if publish else "0")
    persisting_compile._warned.clear()


def _published_by_host_a(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> tuple[Path, list[bytes]]:
    """Host A compiles one kernel and publishes it to a fresh ``file://`` store: (the store, its compiles)."""
    pytest.importorskip("fsspec")
    store = tmp_path / "store"
    store.mkdir()
    compiles: list[bytes] = []
    _on_host(monkeypatch, tmp_path / "host-a", store, publish=True)
    persisting_compile.route(module := flashinfer_like(compiles))
    module.cached_compile(Kernel(), compile_options=OPTIONS)
    return store, compiles


def test_a_kernel_compiled_on_one_host_is_fetched_not_compiled_on_another(
    dsl: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    store, compiles = _published_by_host_a(monkeypatch, tmp_path)
    assert len(list((store / "v1" / "blobs").iterdir())) == 1

    _on_host(monkeypatch, tmp_path / "host-b", store, publish=False)
    persisting_compile.route(module := flashinfer_like(compiles))
    fetched = module.cached_compile(Kernel(), compile_options=OPTIONS)
    assert isinstance(fetched, Loaded) and fetched.blob.endswith(b":compiled-0")
    assert len(compiles) == 1  # host B compiled nothing
    assert len(KernelCache(tmp_path / "host-b").entries()) == 1  # and keeps it for its later processes


def test_a_tampered_kernel_in_the_store_is_refused_and_compiled_here(
    dsl: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store, compiles = _published_by_host_a(monkeypatch, tmp_path)
    blob = next((store / "v1" / "blobs").iterdir())
    blob.write_bytes(blob.read_bytes()[:-1] + b"X")

    _on_host(monkeypatch, tmp_path / "host-b", store, publish=False)
    persisting_compile.route(module := flashinfer_like(compiles))
    with caplog.at_level(logging.WARNING):
        again = module.cached_compile(Kernel(), compile_options=OPTIONS)
    assert isinstance(again, Compiled) and len(compiles) == 2
    assert "does not match its manifest" in caplog.text


def test_a_store_that_is_not_there_is_one_warning_and_a_local_compile(
    dsl: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    pytest.importorskip("fsspec")
    compiles: list[bytes] = []
    _on_host(monkeypatch, tmp_path / "host-a", tmp_path / "not-mounted", publish=True)
    persisting_compile.route(module := flashinfer_like(compiles))
    with caplog.at_level(logging.WARNING):
        compiled = module.cached_compile(Kernel(), compile_options=OPTIONS)
    assert isinstance(compiled, Compiled) and len(KernelCache(tmp_path / "host-a").entries()) == 1
    assert "there is no store at" in caplog.text


def test_the_start_ledger_counts_each_compile_load_and_fetch(
    dsl: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from jitguard.ledger import tally

    monkeypatch.delenv(tally.START_ID, raising=False)
    tally.forget()
    try:
        ledger = tally.begin("vllm")
        compiles: list[bytes] = []
        persisting_compile.route(first := flashinfer_like(compiles))
        first.cached_compile(Kernel(), compile_options=OPTIONS)  # compiled and kept
        persisting_compile.route(later := flashinfer_like(compiles))
        later.cached_compile(Kernel(), compile_options=OPTIONS)  # loaded from the kernel cache
        counts = ledger.record.layers["cutedsl"]
        assert (counts.compiled, counts.cached, counts.restored) == (1, 1, 0)
        assert len(counts.examples) == 1
        tally.forget()
        ledger = tally.begin("vllm")
        _published_by_host_a(monkeypatch, tmp_path)  # another host's compile, published
        _on_host(monkeypatch, tmp_path / "host-b", tmp_path / "store", publish=False)
        persisting_compile.route(module := flashinfer_like(compiles))
        module.cached_compile(Kernel(), compile_options=OPTIONS)
        assert ledger.record.layers["cutedsl"].restored == 1
    finally:
        tally.forget()
