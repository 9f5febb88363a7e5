"""The DSL stack and environment a CuTeDSL kernel is keyed by hold what changes the code, never a path."""

from __future__ import annotations

import json
from pathlib import Path

from fake_dists import make_installed
from jitguard.cutedsl.dsl_stack import dsl_environment, dsl_stack

DSL_FILES = {"nvidia_cutlass_dsl/__init__.py": b"# the DSL\n"}


def _site(root: Path, direct_url: dict[str, object] | None) -> str:
    info = make_installed(root, "nvidia-cutlass-dsl", "4.6.0", DSL_FILES)
    if direct_url is not None:
        (info / "direct_url.json").write_text(json.dumps(direct_url))
    return str(root)


def test_the_same_wheel_installed_from_two_places_is_one_stack(tmp_path: Path) -> None:
    archive = {"archive_info": {"hash": "sha256=" + "ab" * 32}}
    here = _site(tmp_path / "a", {"url": "file:///home/alice/wheels/dsl.whl", **archive})
    there = _site(tmp_path / "b", {"url": "file:///mnt/cache/dsl.whl", **archive})
    assert dsl_stack((here,)) == dsl_stack((there,)) != ()
    assert "alice" not in "".join(dsl_stack((here,)))


def test_another_archive_of_the_same_version_is_another_stack(tmp_path: Path) -> None:
    one = _site(tmp_path / "a", {"url": "file:///w/dsl.whl", "archive_info": {"hash": "sha256=" + "ab" * 32}})
    other = _site(
        tmp_path / "b", {"url": "file:///w/dsl.whl", "archive_info": {"hash": "sha256=" + "cd" * 32}}
    )
    assert dsl_stack((one,)) != dsl_stack((other,))


def test_no_dsl_installed_is_no_stack(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    assert dsl_stack((str(tmp_path / "empty"),)) == ()


def test_output_settings_are_left_out_and_everything_else_kept() -> None:
    env = {
        "CUTE_DSL_CACHE_DIR": "/var/cache/cute",
        "CUTE_DSL_DUMP_DIR": "/tmp/dump",
        "CUTE_DSL_LOG_LEVEL": "10",
        "CUTE_DSL_KEEP": "ptx,cubin",
        "CUTE_DSL_ARCH": "sm_90a",
        "CUTE_DSL_COMPILER_OPT": "-O2",
        "CUTE_DSL_NEW_THING": "1",
        "PATH": "/usr/bin",
    }
    assert dsl_environment(env) == (
        "CUTE_DSL_ARCH=sm_90a",
        "CUTE_DSL_COMPILER_OPT=-O2",
        "CUTE_DSL_NEW_THING=1",
    )
