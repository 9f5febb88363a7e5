"""Why vLLM compiled, from its own compile-cache directories: the key directory of this start beside a restored
one, and which part of the key differs, read from the ``cache_key_factors.json`` vLLM writes in each rank's
directory (``<root>/torch_compile_cache/<key>/rank_0_0/backbone/``, the layout of vLLM 0.17-0.33)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from jitguard.ledger.tools import key_difference, vllm_key_factors, vllm_miss_cause


def _key_dir(root: Path, key: str, factors: dict[str, Any] | None, prefix: str = "backbone") -> Path:
    rank = root / "torch_compile_cache" / key / "rank_0_0" / prefix
    rank.mkdir(parents=True)
    if factors is not None:
        (rank / "cache_key_factors.json").write_text(json.dumps(factors))
    return root / "torch_compile_cache" / key


def _factors(**env: Any) -> dict[str, Any]:
    return {
        "env": {"VLLM_USE_AOT_COMPILE": True, "VLLM_PP_LAYER_PARTITION": None, **env},
        "config_hash": "c1",
        "code_hash": "k1",
        "compiler_hash": "i1",
    }


def test_a_restored_key_beside_this_one_names_the_variable_that_differs(tmp_path: Path) -> None:
    here = _key_dir(tmp_path, "aaaa000001", _factors(VLLM_CONFIG_ROOT="/home/b/.config/vllm"))
    _key_dir(tmp_path, "bbbb000002", _factors(VLLM_CONFIG_ROOT="/home/a/.config/vllm"))
    cause = vllm_miss_cause(SimpleNamespace(cache_dir=str(here)))
    assert "key here is aaaa000001, the cache holds bbbb000002" in cause
    assert "VLLM_CONFIG_ROOT is '/home/b/.config/vllm' here, '/home/a/.config/vllm' there" in cause
    assert "hash differs" not in cause


def test_each_hash_that_differs_is_named_by_what_it_covers(tmp_path: Path) -> None:
    here = _key_dir(tmp_path, "aaaa000001", {**_factors(), "code_hash": "k2", "config_hash": "c2"})
    _key_dir(tmp_path, "bbbb000002", _factors(), prefix="")  # an empty prefix: the file in the rank dir
    cause = vllm_miss_cause(SimpleNamespace(cache_dir=str(here)))
    assert "config hash differs (vLLM's config (the model's name or local path" in cause
    assert "code hash differs (the source files torch.compile traced (vLLM's install path" in cause
    assert "compiler hash" not in cause and "VLLM_" not in cause


def test_more_than_three_variables_are_counted_not_listed() -> None:
    ours = _factors(A=1, B=2, C=3, D=4, E=5)
    theirs = _factors()
    text = key_difference(ours, theirs)
    assert text.count(" here, unset there") == 3 and "2 more environment variables differ" in text


def test_without_vllms_record_the_cause_says_so(tmp_path: Path) -> None:
    here = _key_dir(tmp_path, "aaaa000001", None)
    _key_dir(tmp_path, "bbbb000002", _factors())
    cause = vllm_miss_cause(SimpleNamespace(cache_dir=str(here)))
    assert "the cache holds bbbb000002" in cause and "no cache_key_factors.json" in cause
    assert vllm_miss_cause(SimpleNamespace(cache_dir="")).startswith("vLLM's compile cache held no artifacts")
    alone = _key_dir(tmp_path / "alone", "cccc000003", _factors())
    assert "has no entry for key cccc000003" in vllm_miss_cause(SimpleNamespace(cache_dir=str(alone)))


def test_a_record_behind_a_link_or_writable_by_others_is_not_read(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "cache_key_factors.json").write_text(json.dumps(_factors()))
    linked = tmp_path / "torch_compile_cache" / "dddd000004"
    (linked / "rank_0_0").mkdir(parents=True)
    (linked / "rank_0_0" / "backbone").symlink_to(elsewhere)
    assert vllm_key_factors(linked) is None
    open_to_all = _key_dir(tmp_path, "eeee000005", _factors())
    record = open_to_all / "rank_0_0" / "backbone" / "cache_key_factors.json"
    os.chmod(record, 0o666)
    assert vllm_key_factors(open_to_all) is None
