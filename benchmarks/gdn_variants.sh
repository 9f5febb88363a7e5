#!/usr/bin/env bash
# FlashInfer GDN prefill: the model's instances vs the full module, on the H200 host (benchmarks/gdn_variants.py).
# One device call per line below (each stays under the 10-minute limit), in this order, back to back: the
# machine stays warm ~30 s after a call, and the subset stage compares with the reference tensors the full
# stage left in ROOT (/tmp). After each call copy the returned gdn_variants.jsonl and gdn_variants.md into
# benchmarks/results/: the next call starts from those rows (and, if the machine went cold, compares bitwise
# by the full stage's digests in them).
#
# Carry .whl/ (carry: [".whl"]) holding, fetched on the CPU machine (see the script's docstring):
#   flashinfer_python-0.6.6-py3-none-any.whl [flashinfer_python-0.6.12-py3-none-any.whl]
#   apache_tvm_ffi-0.1.15.post2-*cp312*manylinux*.whl  pyelftools-*.whl
#
#   OUT=$OUT bash benchmarks/gdn_variants.sh 0.6.6 full          # ~5 min: cold full module + reference outputs
#   OUT=$OUT bash benchmarks/gdn_variants.sh 0.6.6 subset lazy   # ~7 min: --plan, cold subset, numerics, guard, lazy
#   OUT=$OUT bash benchmarks/gdn_variants.sh 0.6.12 full         # 66 files: stops at its 520 s timeout (48 done)
#   OUT=$OUT bash benchmarks/gdn_variants.sh 0.6.12 resume       # the next call, warm: the rest (202 s) + reference
#   OUT=$OUT bash benchmarks/gdn_variants.sh 0.6.12 subset       # ~4 min
# (`resume` goes on with the workspace the timed-out `full` left; the table adds the two calls up.)
set -uo pipefail
version=${1:?flashinfer version, e.g. 0.6.6}
shift
OUT=${OUT:-/tmp/out}
ROOT=${ROOT:-/tmp/jitguard-variants}
SITE=/tmp/site-$version
mkdir -p "$OUT"
if [ ! -d "$SITE/flashinfer" ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$SITE" \
    .whl/flashinfer_python-"$version"-*.whl .whl/apache_tvm_ffi-*.whl .whl/pyelftools-*.whl || exit 1
fi
export PYTHONPATH="$PWD/src:$SITE" PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$OUT/gdn_variants_gpu.txt" 2>&1
rc=0
for stage in "$@"; do
  extra=()
  if [ "$stage" = resume ]; then stage=full; extra=(--resume); fi
  python3 benchmarks/gdn_variants.py "$stage" "${extra[@]}" --flashinfer "$version" --root "$ROOT" --out "$OUT" 2>&1 | tail -40 || rc=1
done
exit $rc
