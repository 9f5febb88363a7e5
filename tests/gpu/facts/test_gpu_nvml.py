"""GPU facts through the real NVML, on a GPU host (marker ``gpu``): the devices match nvidia-smi, the probe
creates no CUDA context in this process, and CUDA_VISIBLE_DEVICES is honoured."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from jitguard.facts import gpu

pytestmark = pytest.mark.gpu


@pytest.fixture(autouse=True)
def _needs_nvml() -> None:
    import ctypes

    try:
        ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:
        pytest.skip("no NVIDIA driver (libnvidia-ml.so.1) on this host")


def smi_rows() -> list[list[str]]:
    smi = shutil.which("nvidia-smi")
    if smi is None:
        pytest.skip("nvidia-smi is not on PATH")
    out = subprocess.run(
        [
            smi,
            "--query-gpu=index,name,compute_cap,driver_version,memory.total,uuid",
            "--format=csv,noheader,nounits",
        ],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    ).stdout
    return [[c.strip() for c in line.split(",")] for line in out.splitlines() if line.strip()]


def test_nvml_devices_match_nvidia_smi() -> None:
    env = {k: v for k, v in os.environ.items() if k != "CUDA_VISIBLE_DEVICES"}
    facts = gpu.probe(env)
    rows = smi_rows()
    assert facts.source == "nvml"
    assert [d.name for d in facts.devices] == [r[1] for r in rows]
    assert [d.capability for d in facts.devices] == [r[2] for r in rows]
    assert [d.uuid for d in facts.devices] == [r[5] for r in rows]
    assert facts.driver_version == rows[0][3]
    assert facts.cuda_driver_version is not None
    for device, row in zip(facts.devices, rows, strict=True):
        assert device.memory_total is not None
        assert abs(device.memory_total / 1024**2 - int(row[4])) < 1024  # NVML bytes vs nvidia-smi MiB


def test_cuda_visible_devices_is_honoured() -> None:
    rows = smi_rows()
    last = len(rows) - 1
    facts = gpu.probe({**os.environ, "CUDA_VISIBLE_DEVICES": str(last)})
    assert [d.index for d in facts.devices] == [last]
    assert facts.hidden == len(rows) - 1
    by_uuid = gpu.probe({**os.environ, "CUDA_VISIBLE_DEVICES": rows[0][5][:12]})
    assert [d.index for d in by_uuid.devices] == [0]


def test_probe_creates_no_cuda_context() -> None:
    """Probing never creates a CUDA context (the GPU lists no compute process for us) nor imports torch.

    NVML may load libcuda.so itself; what must not happen is a context, which costs GPU memory and would break a
    later fork."""
    code = (
        "import os, subprocess, sys; from jitguard.facts import gpu; f = gpu.probe(os.environ); "
        "assert f.present, f.reason; "
        "apps = subprocess.run(['nvidia-smi', '--query-compute-apps=pid', '--format=csv,noheader'], "
        "capture_output=True, text=True, check=True).stdout.split(); "
        "print(str(os.getpid()) in apps, 'torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.split() == ["False", "False"]
