"""A carry-able site dir that lets a released SGLang run for real on the H200 device host (python 3.12, torch
2.11 cu130 preinstalled, no network there), with this project installed beside it. Built here, on the CPU
machine, from the project root:

    python3 benchmarks/sglang_payload.py 0.5.15 .gpu/sglang0515              # nvcc-era FlashInfer (0.6.12)
    python3 benchmarks/sglang_payload.py 0.5.17 .gpu/sglang0517              # CuTeDSL era (0.6.15.post1)
    python3 benchmarks/sglang_payload.py 0.5.15 .gpu/x --plan                # what it would carry, nothing built

Only SGLang releases that pin ``torch==2.11.0`` load their compiled ops there: 0.5.15 - 0.5.17. What travels:
the wheels SGLang requires that the host lacks (its package list: ``--kinds FILE``, else all of them), resolved
for Linux x86_64 / CPython 3.12, installed with ``pip --target`` into one site dir, minus what an H200 start of
a GDN model never imports (``DROP``, each with its reason), minus the parts of sglang-kernel another GPU
needs (``prune``: the SM100 build of its ops, FlashMLA; FA3's 1.7 GB ``flash_ops`` unless ``--fa3``: the
engine then serves full attention with ``--attention-backend triton``), plus transformers at SGLang's pin.

Result in OUTDIR: ``part.N`` (<= 60 MB each: a zstd-compressed tar of ``site/``), the ``zstandard`` wheel,
``unpack.py`` (this directory's ``payload_unpack.py``) and ``payload.json`` (what was carried, dropped, sizes).
Carrying it: ``benchmarks/sglang_engine.py``'s header.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
PART_BYTES = 60_000_000
PLATFORMS = (
    "manylinux_2_17_x86_64",
    "manylinux2014_x86_64",
    "manylinux_2_24_x86_64",
    "manylinux_2_26_x86_64",
    "manylinux_2_27_x86_64",
    "manylinux_2_28_x86_64",
    "manylinux_2_31_x86_64",
    "manylinux_2_34_x86_64",
    "manylinux_2_5_x86_64",
    "manylinux1_x86_64",
)
TARGET = {"python_version": "3.12", "platform_machine": "x86_64", "sys_platform": "linux", "extra": ""}
# The host's CUDA torch stack provides these (a carried copy would shadow the host's, built for it).
HOST_STACK = re.compile(
    r"^(torch|torchaudio|torchvision|triton|numpy|cuda-.*|nvidia-(?!cutlass-dsl|mathdx|cudnn-frontend).*)$"
)
# Packages a tiny GDN model's start on an H200 never imports, read from SGLang 0.5.15 - 0.5.17's code: lazily
# imported behind a kernel, model family or feature the start does not use. Each is left out only while no
# module of the release's ``sglang`` package (its tests aside) imports it unguarded (at column 0) outside the ``LAZY`` paths named for
# it (``imported_at_start``): e.g. 0.5.16+ import xgrammar from a function-call parser that server_args imports.
DROP = {
    "flashinfer-cubin": "prebuilt TRT-LLM cubins (SM100 kernels); FlashInfer JIT-builds what SM90 runs",
    "flash-attn-4": "FA4 (SM100 attention), never imported on SM90",
    "tilelang": "DeepSeek sparse attention kernels only (dsa/, dsv4/, nsa/)",
    "z3-solver": "tilelang's dependency",
    "tokenspeed-mla": "MLA decode for DeepSeek models only",
    "tokenspeed-triton": "tokenspeed-mla's Triton fork",
    "quack-kernels": "the Blackwell GDN/KDA CuTeDSL kernels only",
    "sgl-deep-gemm": "FP8 GEMMs for quantized checkpoints (a dummy bf16 model uses none)",
    "torchao": "quantization methods the model does not use",
    "torchcodec": "multimodal processors (audio/video)",
    "nvidia-mathdx": "cuBLASDx headers for SGLang's load-balancer JIT kernel",
    "xgrammar": "constrained decoding: no grammar backend without a tokenizer (skip_tokenizer_init)",
    "llguidance": "a constrained-decoding backend that is not the default",
    "datasets": "benchmark and eval scripts",
    "multiprocess": "datasets' dependency",
    "modelscope": "ModelScope downloads (SGLANG_USE_MODELSCOPE)",
    "modelscope-hub": "modelscope's dependency",
    "kernels": "Hugging Face hub kernels, never on the start path",
    "kernels-data": "kernels' dependency",
    "ipython": "interactive debugging helpers",
    "py-spy": "a profiler binary for hang dumps",
    "anthropic": "the Anthropic-compatible API adapter (lazy)",
    "mistral-common": "Mistral tokenizers",
    "pycountry": "mistral-common's dependency",
    "helion": "Helion MoE kernels (an opt-in Triton MoE runner)",
    "humming-kernels": "Humming MXFP4 quantized MoE kernels",
    "nccl4py": "NCCL's Python bindings for the kernels above (SGLang uses torch.distributed's NCCL)",
}
DROP_WITH_IPYTHON = (
    "jedi",
    "parso",
    "prompt-toolkit",
    "pexpect",
    "ptyprocess",
    "stack-data",
    "executing",
    "asttokens",
    "pure-eval",
    "traitlets",
    "matplotlib-inline",
    "ipython-pygments-lexers",
    "wcwidth",
)
MODULES = {  # import name, where it is not the distribution's
    "flashinfer-cubin": "flashinfer_cubin",
    "flash-attn-4": "flash_attn",
    "z3-solver": "z3",
    "quack-kernels": "quack",
    "sgl-deep-gemm": "deep_gemm",
    "ipython": "IPython",
    "py-spy": "",
    "nvidia-mathdx": "",
    "tokenspeed-triton": "",
    "humming-kernels": "humming",
    "nccl4py": "nccl",
}
LAZY = {  # where an unguarded import of a left-out package is fine: modules only its feature imports
    "tilelang": ("layers/attention/dsa/", "layers/attention/dsv4/", "layers/attention/nsa/"),
    "quack-kernels": (
        "layers/attention/linear/kernels/gdn_blackwell/",
        "layers/attention/linear/kernels/kda_blackwell/",
    ),
    "torchcodec": ("multimodal/",),
    "xgrammar": ("constrained/xgrammar_backend.py",),
    "llguidance": ("constrained/llguidance_backend.py",),
    "helion": ("layers/moe/moe_runner/triton_utils/helion_utils.py",),
    "humming-kernels": ("layers/quantization/humming_utils.py",),
}
# Pinned at a version the host does not have: carried even though the host has the package (transformers at
# SGLang's pin; tokenizers at what that transformers accepts, which excludes the host's newer one: transformers
# refuses to import otherwise).
OVER_HOST = ("transformers", "tokenizers")
# The CuTeDSL: FlashInfer's GDN kernels need it in every era (SGLang's FlashInfer GDN loader imports the CuTeDSL
# decode module beside the nvcc-built prefill). Its CUDA-13 libs wheel and -libs-base list the same paths in
# some versions (the one extracted last wins): -libs-base is left out when they overlap (``overlapping``).
DSL_BASE, DSL_CU13 = "nvidia-cutlass-dsl-libs-base", "nvidia-cutlass-dsl-libs-cu13"


def norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def host_packages(kinds: Path | None) -> set[str]:
    """The Python packages the device host's image holds (the comma-separated list after "Packages:" in the
    device's description), normalized; none without that file."""
    if kinds is None:
        return set()
    try:
        text = kinds.read_text().split("Packages:")[-1]
    except OSError:
        return set()
    return {norm(x.strip().rstrip(".")) for x in text.split(",") if x.strip()}


def requirements_of(wheel: Path) -> list[str]:
    """The wheel's Requires-Dist for Linux x86_64 / CPython 3.12, markers evaluated and removed."""
    from packaging.requirements import Requirement

    with zipfile.ZipFile(wheel) as z:
        meta = z.read(next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))).decode()
    found = []
    for line in meta.splitlines():
        if line.startswith("Requires-Dist:"):
            req = Requirement(line.split(":", 1)[1].strip())
            if req.marker is not None and not req.marker.evaluate(TARGET):
                continue
            req.marker = None
            found.append(str(req))
    return found


def pin_of(requirements: list[str], name: str) -> str | None:
    """The exact version ``requirements`` pin ``name`` to (``==``), or None."""
    from packaging.requirements import Requirement

    for text in requirements:
        req = Requirement(text)
        if norm(req.name) == norm(name):
            pins = [s.version for s in req.specifier if s.operator == "=="]
            return pins[0] if pins else None
    return None


@dataclass
class Plan:
    """What to carry for one SGLang release: each resolved package, kept or left out (and why)."""

    sglang: str
    flashinfer: str | None
    carry: list[str] = field(default_factory=list)  # name==version
    dropped: dict[str, str] = field(default_factory=dict)  # name==version -> why
    on_host: list[str] = field(default_factory=list)


def decide(
    sglang: str,
    flashinfer: str | None,
    resolved: list[tuple[str, str]],
    have: set[str],
    imported: dict[str, list[str]] | None = None,
) -> Plan:
    """Sort the resolved (name, version) pairs into carried, dropped (with the reason) and on the host.
    ``imported``: per dropped candidate, the SGLang modules that import it unguarded (those keep it)."""
    plan = Plan(sglang, flashinfer)
    drops = dict(DROP)
    if not (imported or {}).get("ipython"):  # its dependencies go only with it
        drops.update({n: "ipython's dependency" for n in DROP_WITH_IPYTHON})
    for name, version in resolved:
        key, pinned = norm(name), f"{name}=={version}"
        users = (imported or {}).get(key, [])
        if key in drops and not users:
            plan.dropped[pinned] = drops[key]
        elif key in OVER_HOST or key in (DSL_BASE, DSL_CU13) or users:
            plan.carry.append(pinned)
        elif key in have or HOST_STACK.match(key):
            plan.on_host.append(pinned)
        else:
            plan.carry.append(pinned)
    return plan


def imported_at_start(wheel: Path, names: list[str]) -> dict[str, list[str]]:
    """name -> the ``sglang`` modules of ``wheel`` that import it at column 0 (unguarded: importing the
    module imports it), outside its tests and the ``sglang/srt`` paths ``LAZY`` names for it. The whole package
    counts: ``import sglang`` itself runs ``sglang/utils.py``, which imports IPython."""
    modules = {n: MODULES.get(n, n.replace("-", "_")) for n in names}
    pattern = {
        n: re.compile(rf"^(?:import|from) {re.escape(m)}(?:[. ]|$)", re.M) for n, m in modules.items() if m
    }
    found: dict[str, list[str]] = {}
    with zipfile.ZipFile(wheel) as z:
        for member in z.namelist():
            if not (member.startswith("sglang/") and member.endswith(".py")) or member.startswith(
                "sglang/test/"
            ):
                continue
            text = z.read(member).decode("utf-8", "replace")
            for name, regex in pattern.items():
                lazy = LAZY.get(name, ())
                in_lazy = member.startswith("sglang/srt/") and member[len("sglang/srt/") :].startswith(lazy)
                if regex.search(text) and not in_lazy:
                    found.setdefault(name, []).append(member)
    return found


def overlapping(first: Path, second: Path) -> bool:
    """Whether two wheels install files at the same paths (outside their .dist-info)."""
    names = []
    for wheel in (first, second):
        with zipfile.ZipFile(wheel) as z:
            names.append({n for n in z.namelist() if ".dist-info/" not in n and not n.endswith("/")})
    return bool(names[0] & names[1])


# ---- sglang-kernel: what an H200 loads -----------------------------------------------------------------------
def prune(site: Path, *, fa3: bool) -> dict[str, int]:
    """Remove what an SM90 start never loads; {path: bytes} removed. sgl_kernel loads ``sm90/common_ops`` on
    compute capability 9.0 (``load_utils._load_architecture_specific_ops``), ``flash_ops`` only through
    ``sgl_kernel.flash_attn`` (FA3, the fa3 attention backend) and ``flashmla_ops`` through ``flash_mla``."""
    kernel = site / "sgl_kernel"
    victims = [kernel / "sm100", *kernel.glob("flashmla_ops*.so")]
    if not fa3:
        victims += list(kernel.glob("flash_ops*.so"))
    # xgrammar's C++ headers are for C++ users; TVM-FFI's stay: its load_inline (SGLang's and FlashInfer's JIT
    # kernels) compiles against them, and without them every JIT build fails ("Cannot find include path").
    victims += list(site.glob("xgrammar*/include"))
    victims += list(site.glob("xgrammar/lib/*.a"))  # the static library, for C++ users; Python loads the .so
    victims += [site / "bin", *site.glob("sglang/test"), *site.glob("sglang/multimodal_gen/test")]
    removed: dict[str, int] = {}
    for path in victims:
        if path.exists():
            size = sum(f.stat().st_size for f in path.rglob("*")) if path.is_dir() else path.stat().st_size
            removed[str(path.relative_to(site))] = size
            shutil.rmtree(path) if path.is_dir() else path.unlink()
    for cache in site.rglob("__pycache__"):
        shutil.rmtree(cache, ignore_errors=True)
    return removed


# ---- the steps --------------------------------------------------------------------------------------------
def pip(*args: str) -> None:
    flags = ["--only-binary=:all:", "--python-version", "3.12", "--implementation", "cp"]
    for platform in PLATFORMS:
        flags += ["--platform", platform]
    command = [sys.executable, "-m", "pip", *args[:1], "-q", *flags, *args[1:]]
    subprocess.run(command, check=True, env={"PIP_DISABLE_PIP_VERSION_CHECK": "1", **_env()})


def _env() -> dict[str, str]:
    import os

    return dict(os.environ)


def resolve(requirements: list[str], work: Path) -> list[tuple[str, str]]:
    """Every package ``requirements`` need, resolved for the host's platform (a pip dry run's report)."""
    reqs = work / "requirements.txt"
    reqs.write_text("\n".join(requirements) + "\n")
    report = work / "report.json"
    pip(
        "install",
        "--dry-run",
        "--ignore-installed",
        "--report",
        str(report),
        "--target",
        str(work / "dry"),
        "-r",
        str(reqs),
    )
    return [
        (i["metadata"]["name"], i["metadata"]["version"]) for i in json.loads(report.read_text())["install"]
    ]


def build(args: argparse.Namespace) -> int:
    out: Path = args.out
    work = Path(tempfile.mkdtemp(prefix="sglang-payload-"))
    try:
        started = time.monotonic()
        pip("download", "--no-deps", "-d", str(work / "w"), f"sglang=={args.version}")
        wheel = next((work / "w").glob("sglang-*.whl"))
        requirements = requirements_of(wheel)
        flashinfer = pin_of(requirements, "flashinfer-python") or pin_of(requirements, "flashinfer_python")
        have = host_packages(args.kinds)
        if not have:
            print(f"sglang_payload: no package list at {args.kinds}: carrying everything SGLang requires")
        wanted = [
            r for r in requirements if norm(re.split(r"[\[<>=!~ ;]", r)[0]) not in have - set(OVER_HOST)
        ]
        wanted = [re.sub(r"^flashinfer[-_]python\[cu13\]", "flashinfer-python", r) for r in wanted]
        wanted += _project_dependencies()
        resolved = resolve(wanted, work)
        candidates = [norm(n) for n, _ in resolved if norm(n) in DROP or norm(n) in DROP_WITH_IPYTHON]
        imported = imported_at_start(wheel, candidates)
        for name, users in sorted(imported.items()):
            print(
                f"   carried although a start never uses it: {name} (imported unguarded by {', '.join(users)})"
            )
        plan = decide(args.version, flashinfer, resolved, have, imported)
        print(
            f"== SGLang {args.version}, flashinfer-python {flashinfer}: {len(plan.carry)} packages to carry, "
            f"{len(plan.dropped)} left out, {len(plan.on_host)} on the host"
        )
        for pinned, why in sorted(plan.dropped.items()):
            print(f"   left out {pinned}: {why}")
        if args.plan:
            return 0
        (work / "need.txt").write_text("\n".join(plan.carry) + "\n")
        pip("download", "--no-deps", "-d", str(work / "deps"), "-r", str(work / "need.txt"))
        base = next((work / "deps").glob(f"{DSL_BASE.replace('-', '_')}-*.whl"), None)
        cu13 = next((work / "deps").glob(f"{DSL_CU13.replace('-', '_')}-*.whl"), None)
        if base and cu13 and overlapping(base, cu13):
            base.unlink()
            plan.carry = [c for c in plan.carry if norm(c.split("==")[0]) != DSL_BASE]
            plan.dropped[base.name] = "lists the same files as -libs-cu13 (the CUDA 13 build carried)"
            print(f"   left out {base.name}: same paths as {cu13.name}, whose CUDA 13 build is carried")
        site = work / "site"
        wheels = [str(p) for p in (work / "deps").glob("*.whl")] + [str(wheel)]
        pip("install", "--no-deps", "--no-compile", "--target", str(site), *wheels)
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "install",
                "-q",
                "--no-deps",
                "--no-compile",
                "--target",
                str(site),
                str(REPO),
            ],
            check=True,
        )
        removed = prune(site, fa3=args.fa3)
        unpacked = sum(f.stat().st_size for f in site.rglob("*") if f.is_file())
        print(
            f"== {unpacked / 1e6:.0f} MB unpacked after pruning {sum(removed.values()) / 1e6:.0f} MB; "
            f"compressing (zstd -{args.level}, {time.monotonic() - started:.0f} s so far)"
        )
        out.mkdir(parents=True, exist_ok=True)
        for old in out.glob("part.*"):
            old.unlink()
        squeeze = time.monotonic()
        subprocess.run(
            f"tar cf - -C {work} site | zstd -q -{args.level} -T0 --long=27 | split -b {PART_BYTES} "
            f"-d -a 1 - {out}/part.",
            shell=True,
            check=True,
        )
        squeeze_s = time.monotonic() - squeeze
        pip("download", "--no-deps", "-d", str(out), "zstandard")
        shutil.copy(HERE / "payload_unpack.py", out / "unpack.py")
        parts = {p.name: p.stat().st_size for p in sorted(out.glob("part.*"))}
        record = {
            "sglang": args.version,
            "flashinfer-python": flashinfer,
            "fa3": args.fa3,
            "zstd_level": args.level,
            "compress_s": round(squeeze_s, 1),
            "unpacked_bytes": unpacked,
            "parts": parts,
            "carried": plan.carry,
            "left_out": plan.dropped,
            "pruned": removed,
        }
        (out / "payload.json").write_text(json.dumps(record, indent=2) + "\n")
        print(
            f"== {len(parts)} parts, {sum(parts.values()) / 1e6:.0f} MB ({', '.join(f'{v / 1e6:.1f}' for v in parts.values())} MB), "
            f"compressed in {squeeze_s:.0f} s; whole build {time.monotonic() - started:.0f} s"
        )
        return 0
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _project_dependencies() -> list[str]:
    import tomllib

    with open(REPO / "pyproject.toml", "rb") as handle:
        deps: list[str] = tomllib.load(handle)["project"].get("dependencies", [])
    return deps


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("version", help="the SGLang release, e.g. 0.5.15 (0.5.15 - 0.5.17 pin torch 2.11.0)")
    parser.add_argument(
        "out", type=Path, help="where the parts go (inside the repo and git-ignored, e.g. .gpu/x)"
    )
    parser.add_argument(
        "--level", type=int, default=12, help="zstd level (default 12; 19 is ~4x slower here)"
    )
    parser.add_argument("--fa3", action="store_true", help="keep FA3 (sgl_kernel's flash_ops: ~9 more parts)")
    parser.add_argument(
        "--plan", action="store_true", help="print what would be carried and left out; build nothing"
    )
    parser.add_argument(
        "--kinds",
        type=Path,
        help="the device's description, whose 'Packages:' list is left out (default: carry everything)",
    )
    args = parser.parse_args(argv)
    if not re.fullmatch(r"\d+\.\d+\.\d+(\.post\d+)?", args.version):
        parser.error(f"{args.version!r} is not a release number such as 0.5.15")
    return build(args)


if __name__ == "__main__":
    raise SystemExit(main())
