#!/usr/bin/env bash
# The real vLLM engine scenarios on the H200 host (benchmarks/vllm_engine.py): stock beside jitguard, with
# FlashInfer made to fail for real. Needs the vLLM payload of ../shared/gpu-e2e unpacked into /tmp/site
# (make_payload.sh 0.24.0 .gpu, carried as its README says). ~8 minutes; as root (it hides libcuda's
# dev link and stub while a scenario runs, and puts them back).
#   bash benchmarks/vllm_engine.sh [all|gdn|sampler]      results in $OUT/vllm_engine.{json,md}
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD/src:${SITE:-/tmp/site}" PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1
export OUT=${OUT:-/tmp/out}
python3 -c 'import vllm, jitguard' || { echo "vllm_engine.sh: no vLLM payload in ${SITE:-/tmp/site}" >&2; exit 2; }
python3 benchmarks/vllm_engine.py --stage "${1:-all}" --out "$OUT"
