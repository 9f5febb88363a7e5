"""GPU facts. This machine has no GPU and no NVIDIA driver: the probe must say so, with the reason. The
nvidia-smi fallback is exercised with stand-in nvidia-smi executables (real processes printing what the real
one prints) because no real one exists here; NVML itself is tested on the GPU host (tests/gpu)."""

from __future__ import annotations

import ctypes
import os
import stat
from pathlib import Path

import pytest

from jitguard.facts import gpu

CSV = (
    "0, NVIDIA H200, 9.0, 580.65.06, 143771, GPU-11111111-aaaa-bbbb-cccc-000000000000\n"
    "1, NVIDIA H200, 9.0, 580.65.06, 143771, GPU-22222222-aaaa-bbbb-cccc-000000000000\n"
    "2, NVIDIA B200, 10.0, 580.65.06, 183359, GPU-33333333-aaaa-bbbb-cccc-000000000000\n"
)


def nvml_present() -> bool:
    for name in gpu.NVML_LIBRARIES:
        try:
            ctypes.CDLL(name)
            return True
        except OSError:
            continue
    return False


needs_no_nvml = pytest.mark.skipif(
    nvml_present(), reason="NVML is present: the nvidia-smi fallback is not used"
)


def fake_smi(tmp_path: Path, body: str) -> dict[str, str]:
    bindir = tmp_path / "bin"
    bindir.mkdir(exist_ok=True)
    smi = bindir / "nvidia-smi"
    smi.write_text("#!/bin/sh\n" + body)
    smi.chmod(smi.stat().st_mode | stat.S_IXUSR)
    return {"PATH": f"{bindir}:/usr/bin:/bin"}


@needs_no_nvml
def test_no_gpu_here_is_a_fact_with_the_reason() -> None:
    env = {k: v for k, v in os.environ.items() if k != "CUDA_VISIBLE_DEVICES"}
    if any((Path(p) / "nvidia-smi").exists() for p in env.get("PATH", "").split(":") if p):
        pytest.skip("an nvidia-smi is on PATH")
    facts = gpu.probe(env)
    assert not facts.present
    assert facts.devices == () and facts.capabilities == ()
    assert facts.source is None
    assert facts.reason is not None
    assert "libnvidia-ml.so.1 not found" in facts.reason
    assert "nvidia-smi not on PATH" in facts.reason


@needs_no_nvml
def test_nvidia_smi_fallback(tmp_path: Path) -> None:
    env = fake_smi(tmp_path, f"cat <<'EOF'\n{CSV}EOF\n")
    facts = gpu.probe(env)
    assert facts.source == "nvidia-smi"
    assert [d.name for d in facts.devices] == ["NVIDIA H200", "NVIDIA H200", "NVIDIA B200"]
    assert facts.devices[0].capability == "9.0"
    assert facts.devices[0].memory_total == 143771 * 1024**2
    assert facts.capabilities == ("9.0", "10.0")
    assert facts.capability_pairs() == ((9, 0), (10, 0))
    assert facts.driver_version == "580.65.06"


@needs_no_nvml
def test_old_driver_without_compute_cap_field(tmp_path: Path) -> None:
    body = (
        'case "$1" in *compute_cap*) echo \'Field "compute_cap" is not a valid field to query.\'; exit 2;; esac\n'
        "echo '0, Tesla V100, 470.1, 16160, GPU-abc'\n"
    )
    facts = gpu.probe(fake_smi(tmp_path, body))
    assert facts.source == "nvidia-smi"
    assert facts.devices[0].name == "Tesla V100"
    assert facts.devices[0].capability is None
    assert facts.capabilities == ()


@needs_no_nvml
def test_failing_and_hanging_nvidia_smi_are_reasons(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    failing = gpu.probe(
        fake_smi(tmp_path, "echo 'NVIDIA-SMI has failed because it could not communicate'; exit 9\n")
    )
    assert not failing.present
    assert failing.reason is not None and "could not communicate" in failing.reason

    monkeypatch.setattr(gpu, "SMI_TIMEOUT_S", 0.5)
    hanging = gpu.probe(fake_smi(tmp_path, "exec sleep 30\n"))
    assert not hanging.present
    assert hanging.reason is not None and "did not answer" in hanging.reason


@pytest.mark.parametrize(
    ("visible", "indices", "hidden"),
    [
        (None, [0, 1, 2], 0),
        ("1", [1], 2),
        ("2,0", [2, 0], 1),
        ("1,7,0", [1], 2),  # CUDA stops at the first invalid entry
        ("GPU-3333", [2], 2),
        ("GPU-", [], 3),  # ambiguous prefix: invalid
        ("", [], 3),
        ("-1", [], 3),
    ],
)
def test_cuda_visible_devices(visible: str | None, indices: list[int], hidden: int) -> None:
    facts = gpu._apply_visible(gpu.parse_smi_csv(CSV), visible, "PCI_BUS_ID")
    assert [d.index for d in facts.devices] == indices
    assert facts.hidden == hidden
    assert (facts.reason is None) == bool(indices)


def test_mig_entries_keep_all_gpus_with_a_note() -> None:
    facts = gpu._apply_visible(gpu.parse_smi_csv(CSV), "MIG-GPU-1111/1/0", None)
    assert len(facts.devices) == 3
    assert any("MIG" in n for n in facts.notes)


def test_mixed_gpus_without_pci_order_get_a_note() -> None:
    facts = gpu._apply_visible(gpu.parse_smi_csv(CSV), "0", None)
    assert any("CUDA_DEVICE_ORDER" in n for n in facts.notes)


def test_probe_never_imports_torch() -> None:
    import subprocess
    import sys

    code = (
        "import sys, os; from jitguard.facts import gpu; gpu.probe(os.environ); print('torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "False"
