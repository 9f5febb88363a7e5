"""The GPUs this process would see: name, compute capability, memory, driver.

NVML through ctypes (``libnvidia-ml.so.1`` ships with the driver): it reads the driver's device list without
creating a CUDA context, so the caller's process stays fork-safe and CUDA_VISIBLE_DEVICES changes made later
still apply. Falls back to ``nvidia-smi`` with a short timeout. "No GPU" is a fact with a reason, not an
error. torch is never imported here.
"""

from __future__ import annotations

import ctypes
import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

NVML_LIBRARIES = ("libnvidia-ml.so.1", "libnvidia-ml.so")
SMI_TIMEOUT_S = 3.0
_SMI_FIELDS = "index,name,compute_cap,driver_version,memory.total,uuid"


@dataclass(frozen=True)
class GpuDevice:
    index: int  # NVML / nvidia-smi index (PCI bus order)
    name: str
    major: int | None
    minor: int | None
    memory_total: int | None
    uuid: str | None

    @property
    def capability(self) -> str | None:
        return f"{self.major}.{self.minor}" if self.major is not None else None


@dataclass(frozen=True)
class GpuFacts:
    devices: tuple[GpuDevice, ...]  # the visible ones (after CUDA_VISIBLE_DEVICES)
    driver_version: str | None
    cuda_driver_version: str | None  # the CUDA version the driver supports, e.g. "13.0"
    source: str | None  # "nvml", "nvidia-smi" or None
    reason: str | None  # why there is no GPU, when there is none
    hidden: int = 0  # devices present but hidden by CUDA_VISIBLE_DEVICES
    notes: tuple[str, ...] = ()
    capabilities: tuple[str, ...] = field(init=False)  # distinct "major.minor" of the visible devices

    def __post_init__(self) -> None:
        caps = sorted(
            {(d.major, d.minor) for d in self.devices if d.major is not None and d.minor is not None}
        )
        object.__setattr__(self, "capabilities", tuple(f"{a}.{b}" for a, b in caps))

    @property
    def present(self) -> bool:
        return bool(self.devices)

    def capability_pairs(self) -> tuple[tuple[int, int], ...]:
        return tuple((int(a), int(b)) for a, b in (c.split(".") for c in self.capabilities))


def probe(env: Mapping[str, str]) -> GpuFacts:
    found = _probe_nvml()
    if found.source is None:
        smi = _probe_smi(env)
        if smi.source is not None:
            found = smi
        else:
            found = GpuFacts((), None, None, None, f"{found.reason}; {smi.reason}")
    return _apply_visible(found, env.get("CUDA_VISIBLE_DEVICES"), env.get("CUDA_DEVICE_ORDER"))


class _Memory(ctypes.Structure):
    _fields_ = [("total", ctypes.c_ulonglong), ("free", ctypes.c_ulonglong), ("used", ctypes.c_ulonglong)]


def _probe_nvml() -> GpuFacts:
    lib = None
    for name in NVML_LIBRARIES:
        try:
            lib = ctypes.CDLL(name)
            break
        except OSError:
            continue
    if lib is None:
        return GpuFacts((), None, None, None, "no NVIDIA driver library (libnvidia-ml.so.1 not found)")

    def err(code: int) -> str:
        try:
            lib.nvmlErrorString.restype = ctypes.c_char_p
            return (lib.nvmlErrorString(code) or b"").decode(errors="replace") or f"NVML error {code}"
        except AttributeError:
            return f"NVML error {code}"

    try:
        init = getattr(lib, "nvmlInit_v2", None) or lib.nvmlInit
        rc = init()
        if rc != 0:
            return GpuFacts((), None, None, None, f"NVML could not initialise: {err(rc)}")
    except AttributeError:
        return GpuFacts((), None, None, None, "libnvidia-ml.so.1 lacks nvmlInit")
    try:
        buf = ctypes.create_string_buffer(96)
        driver = buf.value.decode() if lib.nvmlSystemGetDriverVersion(buf, 96) == 0 else None
        cuda_ver = ctypes.c_int()
        cuda_driver = None
        fn = getattr(lib, "nvmlSystemGetCudaDriverVersion_v2", None) or getattr(
            lib, "nvmlSystemGetCudaDriverVersion", None
        )
        if fn is not None and fn(ctypes.byref(cuda_ver)) == 0:
            cuda_driver = f"{cuda_ver.value // 1000}.{(cuda_ver.value % 1000) // 10}"
        count = ctypes.c_uint()
        get_count = getattr(lib, "nvmlDeviceGetCount_v2", None) or lib.nvmlDeviceGetCount
        rc = get_count(ctypes.byref(count))
        if rc != 0:
            return GpuFacts((), driver, cuda_driver, None, f"NVML could not count devices: {err(rc)}")
        get_handle = getattr(lib, "nvmlDeviceGetHandleByIndex_v2", None) or lib.nvmlDeviceGetHandleByIndex
        devices = []
        for i in range(count.value):
            handle = ctypes.c_void_p()
            if get_handle(i, ctypes.byref(handle)) != 0:
                continue
            name_buf = ctypes.create_string_buffer(96)
            lib.nvmlDeviceGetName(handle, name_buf, 96)
            major, minor = ctypes.c_int(), ctypes.c_int()
            has_cc = (
                lib.nvmlDeviceGetCudaComputeCapability(handle, ctypes.byref(major), ctypes.byref(minor)) == 0
            )
            mem = _Memory()
            has_mem = lib.nvmlDeviceGetMemoryInfo(handle, ctypes.byref(mem)) == 0
            uuid = ctypes.create_string_buffer(96)
            has_uuid = lib.nvmlDeviceGetUUID(handle, uuid, 96) == 0
            devices.append(
                GpuDevice(
                    index=i,
                    name=name_buf.value.decode(errors="replace"),
                    major=major.value if has_cc else None,
                    minor=minor.value if has_cc else None,
                    memory_total=mem.total if has_mem else None,
                    uuid=uuid.value.decode() if has_uuid else None,
                )
            )
        reason = None if devices else "NVML reports no devices"
        return GpuFacts(tuple(devices), driver, cuda_driver, "nvml" if devices else None, reason)
    finally:
        lib.nvmlShutdown()


def _probe_smi(env: Mapping[str, str]) -> GpuFacts:
    smi = shutil.which("nvidia-smi", path=env.get("PATH"))
    if smi is None:
        return GpuFacts((), None, None, None, "nvidia-smi not on PATH")
    fields = _SMI_FIELDS
    for _ in range(2):
        try:
            proc = subprocess.run(
                [smi, f"--query-gpu={fields}", "--format=csv,noheader,nounits"],
                capture_output=True,
                text=True,
                timeout=SMI_TIMEOUT_S,
                stdin=subprocess.DEVNULL,
                env={k: v for k, v in env.items() if k != "CUDA_VISIBLE_DEVICES"},
            )
        except subprocess.TimeoutExpired:
            return GpuFacts((), None, None, None, f"nvidia-smi did not answer within {SMI_TIMEOUT_S:g} s")
        except OSError as exc:
            return GpuFacts((), None, None, None, f"nvidia-smi could not run: {exc}")
        if proc.returncode == 0:
            break
        if "compute_cap" in fields and "compute_cap" in (proc.stdout + proc.stderr):
            fields = fields.replace("compute_cap,", "")  # drivers before 510 do not know the field
            continue
        detail = (proc.stdout + proc.stderr).strip().splitlines()
        return GpuFacts(
            (), None, None, None, f"nvidia-smi failed: {detail[-1] if detail else proc.returncode}"
        )
    return parse_smi_csv(proc.stdout, with_capability="compute_cap" in fields)


def parse_smi_csv(text: str, *, with_capability: bool = True) -> GpuFacts:
    devices = []
    driver = None
    for line in text.splitlines():
        cols = [c.strip() for c in line.split(",")]
        if with_capability and len(cols) == 6:
            index, name, cap, driver_col, mem, uuid = cols
        elif not with_capability and len(cols) == 5:
            index, name, driver_col, mem, uuid = cols
            cap = ""
        else:
            continue
        if not index.isdigit():
            continue
        major = minor = None
        if "." in cap and all(p.isdigit() for p in cap.split(".", 1)):
            major, minor = (int(p) for p in cap.split(".", 1))
        driver = driver or driver_col or None
        devices.append(
            GpuDevice(
                index=int(index),
                name=name,
                major=major,
                minor=minor,
                memory_total=int(mem) * 1024 * 1024 if mem.isdigit() else None,  # MiB with nounits
                uuid=uuid or None,
            )
        )
    if not devices:
        return GpuFacts((), driver, None, None, "nvidia-smi lists no GPUs")
    return GpuFacts(tuple(devices), driver, None, "nvidia-smi", None)


def _apply_visible(facts: GpuFacts, visible: str | None, order: str | None) -> GpuFacts:
    """Keep the devices CUDA_VISIBLE_DEVICES exposes, following CUDA's rules where they are simple: indices or
    (prefixes of) GPU UUIDs, the list ending at the first entry that names no device. MIG entries are left
    alone (all devices kept, with a note)."""
    if visible is None or not facts.devices:
        return facts
    notes = list(facts.notes)
    entries = [e.strip() for e in visible.split(",")]
    if any(e.upper().startswith("MIG-") for e in entries):
        notes.append(f"CUDA_VISIBLE_DEVICES={visible!r} names MIG instances; all GPUs are listed")
        return replace(facts, notes=tuple(notes))
    chosen: list[GpuDevice] = []
    for entry in entries:
        device = None
        if entry.isdigit():
            device = next((d for d in facts.devices if d.index == int(entry)), None)
        elif entry.upper().startswith("GPU-"):
            matches = [d for d in facts.devices if d.uuid and d.uuid.upper().startswith(entry.upper())]
            device = matches[0] if len(matches) == 1 else None
        if device is None or device in chosen:
            break  # CUDA ignores the rest of the list after an invalid entry
        chosen.append(device)
    if len({d.name for d in facts.devices}) > 1 and (order or "") != "PCI_BUS_ID":
        notes.append(
            "GPUs differ and CUDA_DEVICE_ORDER is not PCI_BUS_ID: CUDA numbers devices fastest-first, so "
            "CUDA_VISIBLE_DEVICES indices may name other GPUs than nvidia-smi's"
        )
    reason = None if chosen else f"CUDA_VISIBLE_DEVICES={visible!r} hides every GPU"
    return replace(
        facts,
        devices=tuple(chosen),
        reason=reason,
        hidden=len(facts.devices) - len(chosen),
        notes=tuple(notes),
    )
