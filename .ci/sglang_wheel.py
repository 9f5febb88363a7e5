"""Read an SGLang wheel for the GPU-less test environment that .ci/install_sglang.sh prepares (no network here).

requirements WHEEL      the packages SGLang's plugin loader, its server arguments and its linear-attention
                        modules import at module level (not the whole dependency list: that is ~2 GB of
                        serving, multimodal and GPU kernel packages none of these modules import), each
                        with the version the wheel pins (the FlashInfer it pins comes from
                        ``vllm_wheel.py pair``, through the pool of .ci/install_flashinfer.sh)
extract WHEEL DEST      SGLang's sources and its .dist-info into DEST: everything but the compiled
                        extensions (built for a CUDA torch; the modules tested do not load them). Data
                        files come along: ``sglang.jit_kernel`` looks for its ``include``/``csrc`` at import.
"""

from __future__ import annotations

import sys
import zipfile
from pathlib import Path

from vllm_wheel import pin  # same directory; the wheel metadata is read the same way

# What importing sglang.srt.plugins, sglang.srt.server_args (a real ServerArgs for a Qwen3-Next config) and
# sglang.srt.layers.attention.linear.* needs beyond torch and jitguard's own environment, found by importing
# them on this machine (0.5.15 and 0.5.23). Names as the wheel declares them, so its pins apply.
IMPORTED = (
    "aiohttp",
    "compressed-tensors",
    "fastapi",
    "gguf",
    "IPython",
    "msgspec",
    "openai",
    "orjson",
    "partial_json_parser",
    "pillow",
    "pybase64",
    "pydantic",
    "pyzmq",
    "sentencepiece",
    "setproctitle",
    "transformers",
    "xgrammar",  # 0.5.16+: server_args imports function-call parsers that import it at module level
)
# Not declared by SGLang (it comes with its `datasets`) but imported at module level by SGLang's sampling code.
# (triton, which comes with a CUDA torch and which sglang.srt.utils imports, is installed once for all
# versions by install_sglang.sh.)
UNDECLARED = ("dill",)


def requirements(wheel: str) -> list[str]:
    return [pin(wheel, name) for name in IMPORTED] + list(UNDECLARED)


def extract(wheel: str, dest: str) -> int:
    count = 0
    with zipfile.ZipFile(wheel) as z:
        for member in z.namelist():
            top = member.split("/", 1)[0]
            if top.endswith(".dist-info") or (top == "sglang" and not member.endswith(".so")):
                z.extract(member, Path(dest))
                count += 1
    return count


COMMANDS = {"requirements": requirements, "extract": extract}


def main(argv: list[str]) -> int:
    command = COMMANDS.get(argv[0]) if argv else None
    if command is None or len(argv) != (3 if command is extract else 2):
        print(__doc__, file=sys.stderr)
        return 2
    out = command(*argv[1:])
    print(
        "\n".join(out) if isinstance(out, list) else f"extracted {out} files" if command is extract else out
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
