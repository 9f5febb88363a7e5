"""Real flashinfer-python releases for the tests, each installed once with ``pip install --no-deps --target``
into a cached directory under ``JITGUARD_FLASHINFER_ROOT`` (default ``JITGUARD_CI_ROOT``, /tmp/jitguard-ci) that shadows the system
FlashInfer on PYTHONPATH. Installs go through a staging directory renamed into place, under a file lock, so a
half-finished install is never taken for a cached one and two test processes never prepare one at once."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from filelock import FileLock

from release_preparation import CI_ROOT

ROOT = Path(os.environ.get("JITGUARD_FLASHINFER_ROOT") or CI_ROOT)


def release_dir(version: str) -> Path:
    return ROOT / f"flashinfer-{version}"


def _install(target: Path, version: str) -> str | None:
    """Install flashinfer-python==``version`` into ``target``; pip's output on failure, else None."""
    staging = target.with_name(target.name + ".partial")
    subprocess.run(["rm", "-rf", str(staging)], check=True)
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--no-deps",
            "--no-input",
            "--disable-pip-version-check",
            "--target",
            str(staging),
            f"flashinfer-python=={version}",
        ],
        capture_output=True,
        text=True,
        timeout=600,
        stdin=subprocess.DEVNULL,
    )
    if proc.returncode != 0:
        return f"pip exit {proc.returncode}:\n{(proc.stdout + proc.stderr)[-4000:]}"
    staging.rename(target)
    return None


def _installed(target: Path, version: str) -> bool:
    return (target / f"flashinfer_python-{version}.dist-info").is_dir() and (
        target / "flashinfer" / "gdn_prefill.py"
    ).is_file()


def prepared(version: str) -> Path:
    """The --target directory holding flashinfer-python ``version`` (installed on first use). Skips the test when
    it cannot be installed here; fails it in CI."""
    root = release_dir(version)
    root.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(root.with_name(root.name + ".lock")), timeout=900):
        if not _installed(root, version):
            subprocess.run(["rm", "-rf", str(root)], check=True)
            error = _install(root, version)
            if error is not None:
                message = f"could not install flashinfer-python=={version} --no-deps: {error}"
                if os.environ.get("CI") == "true":
                    pytest.fail(message)
                pytest.skip(message)
    return root


def release_env(workdir: Path, *path: Path) -> dict[str, str]:
    """This machine's environment with ``path`` as PYTHONPATH and fresh jitguard / FlashInfer caches."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("JITGUARD_", "FLASHINFER_")) and k != "PYTHONPATH"
    }
    env["PYTHONPATH"] = os.pathsep.join(str(p) for p in path)
    env["JITGUARD_CACHE_DIR"] = str(workdir / "jitguard-cache")
    env["FLASHINFER_WORKSPACE_BASE"] = str(workdir / "flashinfer-workspace")
    return env


# A real CuTeDSL kernel written as FlashInfer writes them (a KeyedCompileMixin of its compile cache, ``ccc``), with
# a host function that launches nothing, so it compiles for sm_90a and runs here with no GPU: the scripts that
# exercise FlashInfer's compile caches with the real DSL paste it in.
TINY_KERNEL = r"""
class Tiny(ccc.KeyedCompileMixin):
    def __init__(self, needs_alpha):
        self.needs_alpha = needs_alpha
        self.manual_cache_key("needs_alpha")

    @cute.jit
    def __call__(self, a: cute.Tensor, n: cutlass.Int32):
        pass
"""
