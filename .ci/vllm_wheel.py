"""Read a vLLM wheel (and pip's report) for the GPU-less test environment .ci/install_vllm.sh prepares (no network).

requirements WHEEL      the wheel's requirements minus what only the GPU build needs: torch and friends
                        (the test interpreter's own torch stands in), CUDA libraries, GPU kernels, and
                        xgrammar (its Linux wheel drags in a 1 GB triton; the script installs it without
                        dependencies). What is left is what vLLM's Python modules import at module level.
pin WHEEL NAME          the requirement the wheel declares for NAME, e.g. 'xgrammar==0.2.8'
pair WHEEL              the FlashInfer the wheel pins: its flashinfer-python requirement (extras dropped:
                        the tests read FlashInfer's code and version, and [cu13] only adds CUDA wheels)
                        and, on a second line where it pins one, its nvidia-cutlass-dsl requirement with
                        its extras (they choose which of the DSL's wheels are installed), e.g.
                        'flashinfer-python==0.7.2.post1' and 'nvidia-cutlass-dsl[cu13]==4.8.0'
extract WHEEL DEST      vLLM's Python sources and its .dist-info into DEST (no compiled extensions: they are
                        built for one CUDA torch and cannot load here; vLLM tolerates their absence)
missing REPORT          from ``pip install --dry-run --report REPORT``: the distributions this interpreter
                        lacks, pinned ('name==version', one a line); what it has already is not listed
env-id                  a short key for this interpreter and every distribution it sees: the dependencies
                        prepared for one environment are reused by an identical one (a fresh CI venv)
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import platform
import re
import sys
import zipfile
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

GPU_ONLY = re.compile(
    r"^(torch|torchaudio|torchvision|torchcodec|triton|xgrammar|numba|ray|cupy.*|nvidia-.*|flashinfer.*|"
    r"apache-tvm-ffi|tilelang|pynvvideocodec|quack-kernels|tokenspeed-mla|humming-kernels|fastsafetensors|"
    r"instanttensor|nvtx|kernels|deep-gemm|flash-attn.*)$",
    re.IGNORECASE,
)


def _declared(wheel: str) -> list[Requirement]:
    """The wheel's unconditional requirements on this platform (extras left out)."""
    with zipfile.ZipFile(wheel) as z:
        meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        text = z.read(meta).decode()
    found = []
    for line in text.splitlines():
        if line.startswith("Requires-Dist:"):
            req = Requirement(line.split(":", 1)[1].strip())
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                req.marker = None
                found.append(req)
    return found


def requirements(wheel: str) -> list[str]:
    return [str(r) for r in _declared(wheel) if not GPU_ONLY.match(r.name)]


def pin(wheel: str, name: str) -> str:
    for req in _declared(wheel):
        if req.name.lower() == name.lower():
            return f"{req.name}{req.specifier}"
    return name


def pair(wheel: str) -> list[str]:
    found = {canonicalize_name(r.name): r for r in _declared(wheel)}
    flashinfer = found.get("flashinfer-python")
    if flashinfer is None:
        raise SystemExit(f"{wheel} pins no flashinfer-python")
    lines = [f"flashinfer-python{flashinfer.specifier}"]
    dsl = found.get("nvidia-cutlass-dsl")
    if dsl is not None:
        extras = f"[{','.join(sorted(dsl.extras))}]" if dsl.extras else ""
        lines.append(f"nvidia-cutlass-dsl{extras}{dsl.specifier}")
    return lines


def extract(wheel: str, dest: str) -> int:
    count = 0
    with zipfile.ZipFile(wheel) as z:
        for member in z.namelist():
            top = member.split("/", 1)[0]
            if top.endswith(".dist-info") or (top == "vllm" and member.endswith((".py", ".json"))):
                z.extract(member, Path(dest))
                count += 1
    return count


def missing(report: str) -> list[str]:
    install = json.loads(Path(report).read_text())["install"]
    return [f"{item['metadata']['name']}=={item['metadata']['version']}" for item in install]


def env_id() -> str:
    seen = sorted({f"{d.metadata['Name']}=={d.version}".lower() for d in importlib.metadata.distributions()})
    key = "\n".join([sys.version, platform.machine(), *seen])
    return hashlib.sha256(key.encode()).hexdigest()[:12]


def main(argv: list[str]) -> int:
    if len(argv) == 2 and argv[0] == "requirements":
        print("\n".join(requirements(argv[1])))
    elif len(argv) == 3 and argv[0] == "pin":
        print(pin(argv[1], argv[2]))
    elif len(argv) == 2 and argv[0] == "pair":
        print("\n".join(pair(argv[1])))
    elif len(argv) == 3 and argv[0] == "extract":
        print(f"extracted {extract(argv[1], argv[2])} files")
    elif len(argv) == 2 and argv[0] == "missing":
        print("\n".join(missing(argv[1])))
    elif argv == ["env-id"]:
        print(env_id())
    else:
        print(__doc__, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
