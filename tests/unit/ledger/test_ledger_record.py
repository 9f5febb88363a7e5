"""The ledger's record: what one process counted, how one start's processes join, which layers a snapshot
covers, the line at ready, and the file's JSON against its shipped schema."""

from __future__ import annotations

from jitguard.ledger.record import (
    LayerCounts,
    Miss,
    ProcessRecord,
    Warm,
    covered_compiles,
    covered_layers,
    merge,
    summary_line,
)
from start_file_schema import file_schema_errors

ROOTS = {
    "vllm": "/c/vllm",
    "sglang": "/c/sglang",
    "triton": "/c/inductor/triton",  # TRITON_CACHE_DIR unset: Inductor points Triton into its own dir
    "inductor": "/c/inductor",
    "flashinfer": "/c/flashinfer",
    "deep_gemm": "/c/deep_gemm",
    "jitguard": "/c/jitguard/kernels",
}


def _process(pid: int, start: str = "s1", **kwargs: object) -> ProcessRecord:
    return ProcessRecord(start, pid, "vllm", "worker", 1000.0 + pid, **kwargs)  # type: ignore[arg-type]


def test_the_processes_of_one_start_join_by_summing_what_each_counted() -> None:
    server = _process(1, layers={"inductor": LayerCounts(cached=1, seconds=0.5)}, phases={"import": 0.1})
    core = _process(
        2,
        ready_at=1050.0,
        layers={
            "inductor": LayerCounts(compiled=2, seconds=3.0, examples=("g",)),
            "triton": LayerCounts(cached=4),
        },
        phases={"import": 0.2, "restore": 0.3},
    )
    other = _process(0, start="s0")  # began before s1
    starts = merge([core, other, server])
    assert [s.start_id for s in starts] == ["s1", "s0"]  # newest first
    joined = starts[0]
    assert [p.pid for p in joined.processes] == [1, 2]
    assert joined.layers["inductor"] == LayerCounts(compiled=2, cached=1, seconds=3.5, examples=("g",))
    assert joined.layers["triton"].cached == 4
    assert joined.phases == {"import": 0.30000000000000004, "restore": 0.3}
    assert joined.ready_after_s == 49.0  # from the first process's start to the last ready


def test_a_snapshot_covers_the_layers_whose_cache_lies_in_a_restored_one() -> None:
    assert covered_layers(["inductor"], ROOTS, "vllm") == ("triton", "triton-autotune", "inductor")
    assert covered_layers(["vllm", "jitguard"], ROOTS, "vllm") == ("cutedsl", "torch-compile")
    assert covered_layers(["vllm"], ROOTS, "sglang") == ()  # SGLang's torch.compile is its own cache's
    assert "tilelang" not in covered_layers(list(ROOTS), ROOTS, "vllm")  # no snapshot holds TileLang's yet


def test_only_compiles_in_covered_layers_count_for_must_hit() -> None:
    record = _process(
        1,
        layers={"triton": LayerCounts(compiled=2, cached=9), "tilelang": LayerCounts(compiled=1)},
        warm=Warm("require", "restored", "default", ("triton", "inductor")),
    )
    assert covered_compiles(merge([record])[0]) == {"triton": 2}


def test_the_line_at_ready_names_each_active_layer_and_jitguards_phases() -> None:
    record = _process(
        1,
        ready_at=1044.0,
        layers={"triton": LayerCounts(compiled=2, seconds=1.25), "inductor": LayerCounts()},
        phases={"facts": 0.2, "restore": 0.15},
        warm=Warm("require", "restored", "default", ("triton",)),
        misses=(Miss("triton", "add", "no kernel for its key"),),
    )
    line = summary_line(record)
    assert line.startswith(
        "start ledger: triton 2 compiled (1.2 s); jitguard 0.35 s (facts 0.20, restore 0.15)"
    )
    assert "inductor" not in line
    assert "warm snapshot restored, 1 must-hit misses" in line
    assert line.endswith("ready 43.0 s after jitguard's start")


def test_the_file_round_trips_and_validates_against_its_schema() -> None:
    record = _process(
        7,
        ready_at=1010.0,
        layers={"cutedsl": LayerCounts(restored=4, seconds=0.1)},
        phases={"lock_waits": 0.5},
        warm=Warm("auto", "present", "default", ("cutedsl",)),
        misses=(Miss("cutedsl", "k", "why"),),
        notes=("Triton: kernels counted through knobs.compilation.listener",),
    )
    data = record.to_json("0.1.0")
    assert file_schema_errors(data) == []
    assert ProcessRecord.from_json(data) == record


def test_a_damaged_record_reads_as_what_can_be_trusted_of_it() -> None:
    assert ProcessRecord.from_json({"schema": "jitguard.start/1"}) is None  # no start id
    assert ProcessRecord.from_json({"schema": "other/1", "start_id": "s"}) is None
    odd = ProcessRecord.from_json(
        {
            "schema": "jitguard.start/1",
            "start_id": "s",
            "pid": -4,
            "layers": {"triton": {"compiled": "many", "seconds": float("nan")}, "nope": {}},
            "phases": {"import": -1, "nonsense": 3},
            "warm": {"covered": ["triton", "bogus"]},
            "misses": ["x", {"layer": "triton"}],
        }
    )
    assert odd is not None
    assert odd.pid == 0 and odd.layers == {"triton": LayerCounts()} and odd.phases == {"import": 0.0}
    assert odd.warm.covered == ("triton",) and len(odd.misses) == 1
