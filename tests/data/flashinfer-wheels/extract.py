"""Writes the committed file lists of FlashInfer's prebuilt-kernel wheels that the image-shape tests install
(tests/real/test_image_shapes.py). Run it again for another release and commit what it writes.

- ``cubin``: a real flashinfer-cubin wheel (``pip download --no-deps flashinfer-cubin==V``; on PyPI up to
  0.6.13) -> ``flashinfer_cubin-V.files``: every file but the cubins, and the first two cubins of each
  directory (the wheel holds ~10k of them; what the tests need is the layout), with the wheel's totals.
- ``jit-cache``: the module list of ``flashinfer-jit-cache==V+cuXXX`` -> ``flashinfer_jit_cache-V.modules``.
  The jit-cache wheels live on flashinfer.ai/whl/cuXXX only (not on PyPI, not reachable from the build
  machines), so the list is the one the wheel is built from: the installed flashinfer-python's own
  ``flashinfer.aot.gen_all_modules`` with its default configuration and every SM capability on (what
  ``python -m flashinfer.aot`` compiles into the wheel). Generating the specs compiles nothing, but some
  generators read files from flashinfer-cubin (install the matching one on PYTHONPATH) or download TRT-LLM
  headers / import nvshmem (stubbed: they only add include and library paths, never names).

Usage: python extract.py cubin WHEEL OUTDIR | python extract.py jit-cache OUTDIR
"""

from __future__ import annotations

import collections
import hashlib
import os
import sys
import zipfile
from pathlib import Path


def cubin(wheel: Path, out: Path) -> Path:
    with zipfile.ZipFile(wheel) as z:
        names = sorted(n for n in z.namelist() if not n.endswith("/"))
    version = wheel.name.split("-")[1]
    kept: list[str] = []
    per_dir: collections.Counter[str] = collections.Counter()
    for name in names:
        if name.endswith(".cubin"):
            parent = name.rsplit("/", 1)[0]
            per_dir[parent] += 1
            if per_dir[parent] > 2:
                continue
        kept.append(name)
    cubins = sum(per_dir.values())
    digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
    header = [
        f"# {wheel.name} (sha256 {digest}): {len(names)} files, {cubins} cubins in {len(per_dir)} directories;",
        "# listed: every file but the cubins, and the first two cubins of each directory.",
    ]
    path = out / f"flashinfer_cubin-{version}.files"
    path.write_text("\n".join([*header, *kept]) + "\n")
    return path


def jit_cache(out: Path) -> Path:
    os.environ.setdefault("FLASHINFER_CUDA_ARCH_LIST", "9.0a 10.0a 12.0a")
    import importlib.metadata

    import flashinfer.jit.env as jit_env
    import flashinfer.jit.fused_moe as fused_moe

    fused_moe.download_trtllm_headers = lambda *a, **k: None  # type: ignore[attr-defined]
    jit_env.get_nvshmem_include_dirs = lambda: []  # type: ignore[attr-defined]
    jit_env.get_nvshmem_lib_dirs = lambda: []  # type: ignore[attr-defined]
    from flashinfer import aot

    cfg = aot.get_default_config()
    every_sm = ("sm90", "sm100", "sm100f", "sm103", "sm110", "sm120", "sm120f", "sm121")
    specs = aot.gen_all_modules(
        cfg["f16_dtype"],
        cfg["f8_dtype"],
        cfg["fa2_head_dim"],
        cfg["fa3_head_dim"],
        cfg["use_sliding_window"],
        cfg["use_logits_soft_cap"],
        dict.fromkeys(every_sm, True),
        cfg["add_comm"],
        cfg["add_gemma"],
        cfg["add_oai_oss"],
        cfg["add_moe"],
        cfg["add_act"],
        cfg["add_misc"],
        cfg["add_xqa"],
    )
    version = importlib.metadata.version("flashinfer-python")
    names = sorted({spec.name for spec in specs})
    header = [
        f"# flashinfer-jit-cache=={version}+cuXXX module names: flashinfer.aot.gen_all_modules of "
        f"flashinfer-python {version},",
        f"# default configuration, every SM capability on: {len(names)} modules, each "
        "flashinfer_jit_cache/jit_cache/<name>/<name>.so in the wheel.",
    ]
    path = out / f"flashinfer_jit_cache-{version}.modules"
    path.write_text("\n".join([*header, *names]) + "\n")
    return path


def main(argv: list[str]) -> int:
    if len(argv) == 3 and argv[0] == "cubin":
        print(cubin(Path(argv[1]), Path(argv[2])))
        return 0
    if len(argv) == 2 and argv[0] == "jit-cache":
        print(jit_cache(Path(argv[1])))
        return 0
    print(__doc__.rsplit("Usage: ", 1)[1].strip(), file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
