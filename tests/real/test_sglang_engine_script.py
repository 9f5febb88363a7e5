"""``benchmarks/sglang_engine.py`` and ``benchmarks/sglang_payload.py`` on this machine: their arguments, the
hosts an engine starts on, what a row counts as expected, the table, and what a payload carries and prunes.
(The engine itself runs on the H200; its options and model against SGLang's real code:
tests/real/sglang/test_sglang_engine_args.py.)"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import zipfile
from pathlib import Path

import pytest

from benchmark_modules import load

load("engine_session")
load("vllm_engine")
load("warm_start")
bench = load("sglang_engine")
payload = load("sglang_payload")


def site_with(tmp: Path, sglang: str = "0.5.15", flashinfer: str = "0.6.12", fa3: bool = False) -> Path:
    site = tmp / "site"
    for name in (
        f"sglang-{sglang}.dist-info",
        f"flashinfer_python-{flashinfer}.dist-info",
        "sgl_kernel/sm90",
    ):
        (site / name).mkdir(parents=True, exist_ok=True)
    if fa3:
        (site / "sgl_kernel" / "flash_ops.abi3.so").write_bytes(b"\0")
    (site / "nvidia_cutlass_dsl" / "python_packages").mkdir(parents=True)
    (site / "nvidia_cutlass_dsl.pth").write_text("nvidia_cutlass_dsl/python_packages\n")
    return site


def row(**fields: object) -> object:
    base = {
        "row": "a",
        "name": "x",
        "jitguard": True,
        "expect": "serves",
        "limit_s": 120.0,
        "sglang": "0.5.15",
    }
    return bench.Row(**{**base, **fields})


def test_bad_rows_and_sites_are_refused_with_what_to_give(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as bad_rows:
        bench.main(["--rows", "a,x", "--site", str(site_with(tmp_path)), "--out", str(tmp_path / "out")])
    assert (
        bad_rows.value.code == 2
        and "--rows takes a comma-separated subset of a,b,c,d" in capsys.readouterr().err
    )
    with pytest.raises(SystemExit):
        bench.main(["--rows", "a", "--site", str(tmp_path / "nothing"), "--out", str(tmp_path / "out")])
    assert "an unpacked SGLang payload's site dir" in capsys.readouterr().err


def test_a_row_on_the_wrong_era_says_which_payload_it_needs(tmp_path: Path) -> None:
    site = site_with(tmp_path)  # 0.5.15, nvcc era
    with pytest.raises(SystemExit, match=r"rows d need a CuTeDSL-era SGLang payload.*SGLang 0\.5\.15"):
        bench.run_rows(["d"], site, bench.Budget(60), tmp_path, [])


def test_every_cache_of_a_host_is_under_it_and_stock_is_jitguard_disabled(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("JITGUARD_SHARE", "file:///elsewhere")  # the caller's jitguard settings never leak in
    site, host = site_with(tmp_path), tmp_path / "host"
    stock = bench.host_env(site, host, jitguard=False)
    guarded = bench.host_env(site, host, jitguard=True)
    caches = (
        "HOME",
        "XDG_CACHE_HOME",
        "SGLANG_CACHE_DIR",
        "TRITON_CACHE_DIR",
        "TORCHINDUCTOR_CACHE_DIR",
        "FLASHINFER_WORKSPACE_BASE",
        "JITGUARD_CACHE_DIR",
        "TVM_FFI_CACHE_DIR",
        "CUTE_DSL_CACHE_DIR",
    )
    assert all(Path(stock[k]).parent == host for k in caches)
    assert stock["JITGUARD_DISABLE"] == "1" and "JITGUARD_DISABLE" not in guarded
    assert "JITGUARD_SHARE" not in guarded
    paths = guarded["PYTHONPATH"].split(":")
    assert paths[0] == str(bench.SRC) and paths[1] == str(site)
    assert paths[2] == str(site / "nvidia_cutlass_dsl" / "python_packages")  # the DSL's .pth, read by hand


def test_an_import_line_pth_adds_the_dir_it_joins(tmp_path: Path) -> None:
    """nvidia-cutlass-dsl 4.6.0's .pth (as SGLang 0.5.16/0.5.17 install it) is an ``import`` line; without its
    ``dsl_packages`` dir on the path FlashInfer's CuTeDSL GDN reads as unavailable (``No module named
    'cutlass'``) and the engine stops at start-up."""
    site = site_with(tmp_path, sglang="0.5.17", flashinfer="0.6.15.post1")
    (site / "nvidia_cutlass_dsl" / "dsl_packages").mkdir()
    (site / "nvidia_cutlass_dsl_packages.pth").write_text(
        "import sys, os, nvidia_cutlass_dsl; sys.path.insert(0, "
        "os.path.join(nvidia_cutlass_dsl.__path__[0], 'dsl_packages'))"
    )
    (site / "other.pth").write_text("import other_thing; other_thing.setup()\n# a comment\nmissing_dir\n")
    paths = bench.python_path(site).split(":")
    assert paths[2:] == [
        str(site / "nvidia_cutlass_dsl" / "python_packages"),
        str(site / "nvidia_cutlass_dsl" / "dsl_packages"),
    ]


def test_full_attention_is_fa3_only_where_the_payload_kept_it(tmp_path: Path) -> None:
    assert bench.attention_backend(site_with(tmp_path / "a")) == "triton"
    assert bench.attention_backend(site_with(tmp_path / "b", fa3=True)) == "fa3"
    assert bench.cutedsl_era(site_with(tmp_path / "c", "0.5.17", "0.6.15.post1"))
    assert not bench.cutedsl_era(site_with(tmp_path / "d"))


def test_what_counts_as_expected() -> None:
    stopped = "[  30.0 s] jitguard: FlashInfer linear attention prefill was requested (--linear-attn-prefill-backend"
    assert bench.meets(row(expect="serves", exit="0", generated=8))
    assert not bench.meets(row(expect="serves", exit="0", generated=3))
    assert bench.meets(row(expect="stops", exit="1", lines=[stopped]))
    assert not bench.meets(row(expect="stops", exit="1", lines=["Scheduler hit an exception: OOM"]))
    assert not bench.meets(row(expect="stops", exit="limit", lines=[stopped]))
    assert bench.meets(row(expect="fails or hangs", exit="limit"))
    assert bench.meets(row(expect="serves or still building", exit="limit", peak_compilers=16))
    assert not bench.meets(row(expect="serves or still building", exit="limit", peak_compilers=0))


def test_the_table_is_rendered_from_result_files(tmp_path: Path) -> None:
    meta = {
        "machine": {
            "gpu": "NVIDIA H200, 580",
            "cpus": 16,
            "python": "3.12.3",
            "sglang": "0.5.15",
            "flashinfer": "0.6.12",
            "sglang_kernel": "0.4.4",
            "torch": "2.11.0+cu130",
            "attention_backend": "triton",
            "date": "2026-12-02",
        },
        "rows": ["a"],
        "command": "python3 benchmarks/sglang_engine.py --rows a",
        "notes": ["libcuda hidden"],
    }
    stopped = row(
        exit="1", verdict_s=31.5, lines=["[  31.5 s] jitguard: ... was requested"], ok=True, expect="stops"
    )
    killed = row(
        name="stock", jitguard=False, exit="limit", expect="fails or hangs", peak_compilers=16, ok=True
    )
    results = tmp_path / "sglang_engine.jsonl"
    results.write_text("\n".join(json.dumps(x) for x in (meta, vars(stopped), vars(killed))) + "\n")
    assert bench.main(["--table", str(results), "--out", str(tmp_path)]) == 0
    table = (tmp_path / "sglang_engine.md").read_text()
    assert "| a | 0.5.15 | x | 1 | 31.5 | - | - |" in table and "yes (stops)" in table
    assert "killed at 120 s" in table and "16 (0)" in table
    assert "`python3 benchmarks/sglang_engine.py --rows a`" in table and "  - libcuda hidden" in table
    assert "[  31.5 s] jitguard: ... was requested" in table
    assert "| - |" in table  # a row that did not serve but left no log names no failure


def test_a_row_that_did_not_serve_names_the_last_exception_of_its_log(tmp_path: Path) -> None:
    log = tmp_path / "logs" / "b.log"
    log.parent.mkdir()
    log.write_text(
        "[  40.0 s] RuntimeError: a first failure, retried\n"
        '[  60.9 s]     raise RuntimeError("Cannot find include path.")\n'
        "[  60.9 s] RuntimeError: Cannot find include path.\n"
        "[  61.0 s] Received sigquit from a child process.\n"
    )
    died = row(name="stock", jitguard=False, exit="-9", expect="serves", log="logs/b.log")
    served = row(exit="0", generated=8, expect="serves", ok=True, log="logs/b.log")
    results = tmp_path / "sglang_engine.jsonl"
    results.write_text("\n".join(json.dumps(vars(x)) for x in (died, served)) + "\n")
    rows, _ = bench.load([results])
    assert rows[0]["failure"] == "RuntimeError: Cannot find include path."
    assert "failure" not in rows[1]
    (tmp_path / "broken.jsonl").write_text("{not json\n")
    assert bench.main(["--table", str(tmp_path / "broken.jsonl"), "--out", str(tmp_path)]) == 2


# ---- the payload --------------------------------------------------------------------------------------------
def wheel(path: Path, files: dict[str, str]) -> Path:
    with zipfile.ZipFile(path, "w") as z:
        for name, text in files.items():
            z.writestr(name, text)
    return path


def test_requirements_are_read_for_the_hosts_platform(tmp_path: Path) -> None:
    meta = "\n".join(
        [
            "Requires-Dist: torch==2.11.0",
            'Requires-Dist: decord2; platform_machine == "aarch64"',
            'Requires-Dist: torchcodec==0.11.1; sys_platform == "linux" and platform_machine != "aarch64"',
            'Requires-Dist: pytest; extra == "test"',
        ]
    )
    found = payload.requirements_of(wheel(tmp_path / "s.whl", {"sglang-0.5.15.dist-info/METADATA": meta}))
    assert found == ["torch==2.11.0", "torchcodec==0.11.1"]
    assert payload.pin_of(found, "Torch") == "2.11.0" and payload.pin_of(found, "numpy") is None


def test_a_left_out_package_that_sglang_imports_unguarded_is_carried(tmp_path: Path) -> None:
    sglang = wheel(
        tmp_path / "sglang.whl",
        {
            "sglang/srt/function_call/parser.py": "from xgrammar import StructuralTag\n",
            "sglang/srt/constrained/xgrammar_backend.py": "import xgrammar\n",  # its own feature: lazy
            "sglang/srt/layers/quant.py": "try:\n    import torchao\nexcept ImportError:\n    pass\n",  # guarded
            "sglang/srt/sampling/custom.py": "import dill\n",
        },
    )
    imported = payload.imported_at_start(sglang, ["xgrammar", "torchao", "dill", "tilelang"])
    assert imported == {
        "xgrammar": ["sglang/srt/function_call/parser.py"],
        "dill": ["sglang/srt/sampling/custom.py"],
    }
    resolved = [
        ("xgrammar", "0.2.1"),
        ("torchao", "0.17.0"),
        ("pydantic", "2.14.4"),
        ("requests", "2.34.2"),
        ("transformers", "5.12.1"),
        ("nvidia-cublas", "13.1"),
        ("nvidia-cutlass-dsl-libs-cu13", "4.5.2"),
    ]
    plan = payload.decide("0.5.16", "0.6.14", resolved, {"requests", "transformers"}, imported)
    assert plan.carry == [
        "xgrammar==0.2.1",
        "pydantic==2.14.4",
        "transformers==5.12.1",
        "nvidia-cutlass-dsl-libs-cu13==4.5.2",
    ]
    assert list(plan.dropped) == ["torchao==0.17.0"]
    assert plan.on_host == ["requests==2.34.2", "nvidia-cublas==13.1"]


def test_overlapping_dsl_wheels_are_told_apart(tmp_path: Path) -> None:
    files = {"nvidia_cutlass_dsl/lib/libcute_dsl_runtime.so": "x", "d.dist-info/RECORD": ""}
    base = wheel(tmp_path / "base.whl", files)
    cu13 = wheel(tmp_path / "cu13.whl", {**files, "d.dist-info/RECORD": "other"})
    other = wheel(tmp_path / "other.whl", {"nvidia_cutlass_dsl/include/x.h": "", "d.dist-info/RECORD": ""})
    assert payload.overlapping(base, cu13) and not payload.overlapping(base, other)


def test_the_pruned_site_keeps_what_an_h200_loads(tmp_path: Path) -> None:
    site = tmp_path / "site"
    for name in (
        "sgl_kernel/sm90/common_ops.abi3.so",
        "sgl_kernel/sm100/common_ops.abi3.so",
        "sgl_kernel/flash_ops.abi3.so",
        "sgl_kernel/flashmla_ops.abi3.so",
        "sgl_kernel/__init__.py",
        "bin/sglang",
        "xgrammar/lib/libxgrammar.a",
        "xgrammar/libxgrammar_bindings.so",
        "sglang/test/t.py",
        "sglang/srt/x.py",
        "sglang/srt/__pycache__/x.pyc",
        "tvm_ffi/include/tvm/ffi/c_api.h",
        "xgrammar/include/xgrammar/xgrammar.h",
    ):
        (site / name).parent.mkdir(parents=True, exist_ok=True)
        (site / name).write_bytes(b"12345")
    removed = payload.prune(site, fa3=False)
    assert set(removed) == {
        "sgl_kernel/sm100",
        "sgl_kernel/flash_ops.abi3.so",
        "sgl_kernel/flashmla_ops.abi3.so",
        "bin",
        "sglang/test",
        "xgrammar/lib/libxgrammar.a",
        "xgrammar/include",
    }
    left = sorted(str(p.relative_to(site)) for p in site.rglob("*") if p.is_file())
    assert left == [
        "sgl_kernel/__init__.py",
        "sgl_kernel/sm90/common_ops.abi3.so",
        "sglang/srt/x.py",
        "tvm_ffi/include/tvm/ffi/c_api.h",  # TVM-FFI's load_inline compiles every JIT kernel against it
        "xgrammar/libxgrammar_bindings.so",
    ]


def test_parts_unpack_into_the_site(tmp_path: Path) -> None:
    pytest.importorskip("zstandard")
    if shutil.which("zstd") is None:
        pytest.skip("the zstd command is needed to make the parts")
    (tmp_path / "site" / "pkg").mkdir(parents=True)
    data = os.urandom(64_000)  # incompressible: zstd's output spans many 4000-byte parts
    (tmp_path / "site" / "pkg" / "blob.bin").write_bytes(data)
    parts = tmp_path / "parts"
    parts.mkdir()
    subprocess.run(
        f"tar cf - -C {tmp_path} site | zstd -q -3 --long=27 | split -b 4000 -d -a 2 - {parts}/part.",
        shell=True,
        check=True,
    )
    unpack = load("payload_unpack")
    names = sorted(str(p) for p in parts.iterdir())
    assert len(names) > 1 and unpack.main([str(tmp_path / "dest"), *reversed(names)]) == 0
    assert (tmp_path / "dest" / "site" / "pkg" / "blob.bin").read_bytes() == data


def test_a_run_is_read_from_sglangs_own_log_lines() -> None:
    session = load("engine_session")
    lines = [
        (12.0, "[2026-12-02 12:00:00] Linear attention kernel backend: decode=triton, prefill=triton"),
        (
            40.5,
            "[2026-12-02 12:00:28] Capture target decode cuda graph end. elapsed=7.25 s, mem usage=0.5 GB.",
        ),
        (41.0, "BENCH READY 123.4"),
    ]
    done = session.EngineRun(limit_s=200.0, status=0, ready_s=41.0, ttft_s=0.2, generated=8, lines=lines)
    read = row(expect="serves")
    bench.read_run(read, done)
    assert read.verdict_s == 12.0 and read.graphs_s == 7.25 and read.exit == "0" and read.generated == 8
    assert read.lines[0].startswith("[  12.0 s]") and "Capture target decode" in read.lines[1]
