#!/usr/bin/env bash
# A carry-able site dir for FlashInfer's CuTeDSL GDN prefill without vLLM (the op path, issue 11), for the H200
# host (python 3.12, torch 2.11 cu130, no network): flashinfer-python, nvidia-cutlass-dsl with its -libs-base,
# -libs-core and -libs-cu13 wheels, apache-tvm-ffi, nvidia-cudnn-frontend and pyelftools (what the host lacks,
# read from its package list), and this project. Built here, on the CPU machine:
#
#   bash benchmarks/cutedsl_payload.sh FLASHINFER_VERSION DSL_VERSION OUTDIR
#   bash benchmarks/cutedsl_payload.sh 0.7.4 4.8.1 .gpu/fi074          # OUTDIR inside the repo, ignored
#
# Result: OUTDIR/part.N (<= 60 MB each: a zstd-compressed tar of one site dir), the zstandard wheel and
# unpack.py (benchmarks/payload_unpack.py). Carry one part per device call, back to back; the last call unpacks:
#   PYTHONPATH=/tmp/zst python3 /tmp/p/unpack.py /tmp /tmp/p/part.*      -> /tmp/site
# then `bash benchmarks/h200_cutedsl.sh op` runs the kernel-cache test and benchmarks/cutedsl_cache.py there.
set -euo pipefail
[ $# -eq 3 ] || { echo "usage: $0 FLASHINFER_VERSION DSL_VERSION OUTDIR" >&2; exit 2; }
flashinfer=$1; dsl=$2; out=$3
cd "$(dirname "$0")/.."
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_ROOT_USER_ACTION=ignore
python=${PYTHON:-python3}
plat=(--only-binary=:all: --python-version 3.12 --implementation cp)
for p in manylinux_2_17_x86_64 manylinux2014_x86_64 manylinux_2_24_x86_64 manylinux_2_27_x86_64 manylinux_2_28_x86_64; do
    plat+=(--platform "$p")
done
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$out"
rm -f "$out"/part.*
echo "== wheels"
"$python" -m pip download -q --no-deps "${plat[@]}" -d "$work/w" \
    "flashinfer-python==$flashinfer" "nvidia-cutlass-dsl==$dsl" "nvidia-cutlass-dsl-libs-base==$dsl" \
    "nvidia-cutlass-dsl-libs-core==$dsl" "nvidia-cutlass-dsl-libs-cu13==$dsl" "apache-tvm-ffi<0.2,>=0.1.12" \
    nvidia-cudnn-frontend "pyelftools>=0.30"
ls -la "$work/w"
echo "== one site dir"
"$python" -m pip install -q --no-deps --no-compile "${plat[@]}" --target "$work/site" "$work"/w/*.whl
"$python" -m pip install -q --no-deps --no-compile --target "$work/site" .
rm -rf "$work/site/bin"
find "$work/site" -name __pycache__ -type d -prune -exec rm -rf {} +
echo "== compress and split ($(du -sh "$work/site" | cut -f1) unpacked)"
tar cf - -C "$work" site | zstd -q -${ZSTD_LEVEL:-12} -T0 --long=27 | split -b 60000000 -d -a 1 - "$out/part."
"$python" -m pip download -q --no-deps "${plat[@]}" -d "$out" zstandard
cp "$(dirname "$0")/payload_unpack.py" "$out/unpack.py"
ls -la "$out"
