"""Versions of the packages that decide which backends can run, read from installed metadata.

``importlib.metadata`` only reads ``*.dist-info/METADATA``: importing torch or flashinfer to ask its version
would cost seconds, may initialise CUDA, and fails exactly when the package is broken.
"""

from __future__ import annotations

import importlib.metadata as metadata
import re
from dataclasses import dataclass, field

# Distribution names as pip spells them (importlib.metadata normalises '-' / '_' and case).
PACKAGES = (
    "flashinfer-python",
    "flashinfer-jit-cache",
    "flashinfer-cubin",
    "nvidia-cutlass-dsl",
    "fla-core",
    "triton",
    "torch",
    "vllm",
    "apache-tvm-ffi",
)

_CUDA_TAG = re.compile(r"^cu(\d+)$")
_ROCM_TAG = re.compile(r"^rocm(\d+(?:\.\d+)*)$")


@dataclass(frozen=True)
class PackageInfo:
    name: str
    version: str
    location: str | None  # the site directory holding it

    @property
    def public_version(self) -> str:
        """The version without its local tag: '2.13.0+cpu' -> '2.13.0'."""
        return self.version.split("+", 1)[0]

    @property
    def local_tag(self) -> str | None:
        return self.version.split("+", 1)[1] if "+" in self.version else None


@dataclass(frozen=True)
class PackageFacts:
    installed: tuple[PackageInfo, ...]
    missing: tuple[str, ...]
    # torch's build flavour from its local version tag: "cpu", "cuda", "rocm", or "unknown" (no tag: PyPI's
    # default wheel, CUDA on Linux x86_64 but we cannot tell which CUDA), None when torch is absent.
    torch_flavour: str | None = field(init=False)
    torch_cuda: str | None = field(init=False)  # "13.0" from "+cu130"

    def __post_init__(self) -> None:
        torch = self.get("torch")
        flavour, cuda = torch_build(torch.version) if torch else (None, None)
        object.__setattr__(self, "torch_flavour", flavour)
        object.__setattr__(self, "torch_cuda", cuda)

    def get(self, name: str) -> PackageInfo | None:
        key = _normalise(name)
        return next((p for p in self.installed if _normalise(p.name) == key), None)

    def version(self, name: str) -> str | None:
        info = self.get(name)
        return info.version if info else None

    def versions(self) -> dict[str, str | None]:
        """Every probed package -> version (None when missing), in PACKAGES order."""
        return {name: self.version(name) for name in PACKAGES}


def probe(names: tuple[str, ...] = PACKAGES) -> PackageFacts:
    installed = []
    missing = []
    for name in names:
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            missing.append(name)
            continue
        version = dist.version
        if not version:  # a broken dist-info without a version is as good as missing
            missing.append(name)
            continue
        location = getattr(dist, "_path", None)  # the .dist-info dir (PathDistribution); no public API for it
        installed.append(
            PackageInfo(name=name, version=version, location=str(location.parent) if location else None)
        )
    return PackageFacts(installed=tuple(installed), missing=tuple(missing))


def torch_build(version: str) -> tuple[str, str | None]:
    """('cpu', None) for '2.13.0+cpu', ('cuda', '13.0') for '2.11.0+cu130', ('rocm', '6.3') for '+rocm6.3'."""
    tag = version.split("+", 1)[1] if "+" in version else ""
    if tag == "cpu":
        return "cpu", None
    m = _CUDA_TAG.match(tag)
    if m:
        digits = m.group(1)
        return "cuda", f"{digits[:-1]}.{digits[-1]}"
    m = _ROCM_TAG.match(tag)
    if m:
        return "rocm", m.group(1)
    return "unknown", None


def _normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()
