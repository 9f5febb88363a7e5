#!/usr/bin/env bash
# The GPU runs of a session on the H200 host, one stage per call (each call is limited to 10 minutes).
# Wheels that host lacks are carried in .whl/ (flashinfer-python 0.6.6, apache-tvm-ffi, fla-core, pyelftools).
#   bash benchmarks/h200.sh build   # doctor, NVML facts test, full FlashInfer GDN build through jitguard
#   bash benchmarks/h200.sh gdn     # GDN GPU tests + backend benchmark, on the module built by `build`
#   bash benchmarks/h200.sh gdn-prebuilt  # the same with a module built earlier (.carry/gdn_prefill_sm90.so)
#   bash benchmarks/h200.sh subset  # stock ninja vs jitguard 32G budget on the same 10-TU subset
#   bash benchmarks/h200.sh ranks4  # 4 processes, one cold module: one builds, the others wait visibly
set -uo pipefail
stage=${1:?stage}
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
SITE=/tmp/site
WS=/tmp/jitguard-bench/workspace
if [ ! -d "$SITE/flashinfer" ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" .whl/*.whl || exit 1
fi
export PYTHONPATH="$PWD/src:$SITE" PYTHONUNBUFFERED=1
export JITGUARD_CACHE_DIR=/tmp/jitguard-cache
versions() { python3 -c "import torch,triton,flashinfer,fla;print('torch',torch.__version__,'triton',triton.__version__,'flashinfer',flashinfer.__version__,'fla',fla.__version__)" 2>&1 | tail -1; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nproc; free -g | head -2; }
case "$stage" in
  build)
    versions | tee "$OUT/machine.txt"
    python3 -m jitguard doctor | tee "$OUT/doctor.txt"
    python3 -m jitguard doctor --json > "$OUT/doctor.json"
    python3 -m pytest -q -m gpu tests/gpu/facts -p no:cacheprovider 2>&1 | tail -5 | tee "$OUT/gpu_facts.txt"
    python3 benchmarks/jit_build.py --config default --workspace "$WS" --out "$OUT" 2>&1 | tail -40
    ;;
  gdn)
    FLASHINFER_WORKSPACE_BASE="$WS" python3 -m pytest -m gpu tests/gpu -v -p no:cacheprovider 2>&1 | tee "$OUT/gdn_gpu_tests.txt" | tail -40
    python3 benchmarks/gdn_backends.py --workspace "$WS" --out "$OUT/gdn_backends.md" 2>&1 | tail -40
    ;;
  gdn-prebuilt)
    # The module built by an earlier `build` stage, carried back in as .carry/gdn_prefill_sm90.so, installed as
    # FlashInfer's own AOT module so no compile runs.
    mkdir -p "$SITE/flashinfer/data/aot/gdn_prefill_sm90"
    cp .carry/gdn_prefill_sm90.so "$SITE/flashinfer/data/aot/gdn_prefill_sm90/"
    python3 -m pytest -m gpu tests/gpu -v -p no:cacheprovider -k "poisoning or no_cuda_context or nvml" 2>&1 | tail -8
    python3 benchmarks/gdn_backends.py --out "$OUT/gdn_backends.md" 2>&1 | tail -30
    ;;
  subset)
    python3 benchmarks/jit_build.py --config stock --sources 8 --workspace /tmp/ws-subset --out "$OUT" 2>&1 | tail -15
    python3 benchmarks/jit_build.py --config 32g --sources 8 --workspace /tmp/ws-subset --out "$OUT" 2>&1 | tail -15
    ;;
  ranks4)
    python3 benchmarks/jit_build.py --config ranks4 --sources 8 --workspace /tmp/ws-ranks --out "$OUT" 2>&1 | tail -30
    ;;
  *) echo "unknown stage $stage"; exit 2 ;;
esac
