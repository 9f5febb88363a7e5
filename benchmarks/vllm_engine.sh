#!/usr/bin/env bash
# The real vLLM engine scenarios on the H200 host (benchmarks/vllm_engine.py: its header says how to build and
# carry the payloads): stock beside jitguard, FlashInfer made to fail for real, one or more vLLM releases in one
# run. As root (it hides libcuda's dev link and stub while a stage runs, and puts them back); within 9 minutes.
#   bash benchmarks/vllm_engine.sh [sampler|gdn|firstuse|all] [SITE...]     results in $OUT/vllm_engine.{*.json,md}
#   bash benchmarks/vllm_engine.sh sampler /tmp/v024/site /tmp/v026/site    the doomed sampler, vLLM 0.24.0 and 0.26.0
#   bash benchmarks/vllm_engine.sh gdn                                       the GDN scenarios, 0.24.0 in /tmp/site
# SITE: an unpacked payload's site dir (default ${SITE:-/tmp/site}).
set -uo pipefail
cd "$(dirname "$0")/.."
stage=${1:-sampler}
shift || true
sites=("$@")
[ ${#sites[@]} -gt 0 ] || sites=("${SITE:-/tmp/site}")
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 OUT=${OUT:-/tmp/out}
args=()
for site in "${sites[@]}"; do
    [ -f "$site/vllm/__init__.py" ] || { echo "vllm_engine.sh: no vLLM payload in $site" >&2; exit 2; }
    args+=(--site "$site")
done
PYTHONPATH="$PWD/src:${sites[0]}" python3 benchmarks/vllm_engine.py --stage "$stage" "${args[@]}" --out "$OUT"
