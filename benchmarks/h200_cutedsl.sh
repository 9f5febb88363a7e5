#!/usr/bin/env bash
# The H200 run for FlashInfer's CuTeDSL era (issue 11): vLLM 0.26.0 + FlashInfer 0.6.14 + nvidia-cutlass-dsl 4.6.0
# (cu13), carried as a payload of vLLM 0.26.0 with 'nvidia-cutlass-dsl[cu13]==4.6.0' (5 parts).
# One step per device call, back to back (the host keeps /tmp only while warm):
#   carry   (parts 0-3, one per call, in .gpu/carry/)
#   unpack  (part 4 + the zstandard wheel + quack-kernels 0.6.0, which vLLM 0.26 imports to warm up its own CuTeDSL
#           router GEMM once the DSL is importable, and make_payload.sh leaves out; 0.6.0 pins the DSL at 4.6.0)
#   op      tests/gpu/test_cutedsl_kernel_cache.py + benchmarks/cutedsl_cache.py   -> $OUT
#   engine  benchmarks/cutedsl_engine.py (vLLM 0.26 engines, stock vs jitguard)    -> $OUT
# The op alone on another FlashInfer (no vLLM; e.g. 0.7.4, the newest): build its 2-part payload here with
# `bash benchmarks/cutedsl_payload.sh 0.7.4 4.8.1 .gpu/fi074`, carry part.0 + unpack.py + the zstandard wheel,
# then part.1 and unpack it into /tmp/site (its header says how), then `op`.
set -u
step=$1
# pip --target skips the DSL's .pth file: its packages go on the path by hand.
export PYTHONPATH=$PWD/src:/tmp/site:/tmp/site/nvidia_cutlass_dsl/dsl_packages
case $step in
  carry)
    mkdir -p /tmp/p && cp .gpu/carry/* /tmp/p/ && ls -la /tmp/p && nvidia-smi -L ;;
  unpack)
    cp .gpu/carry/* /tmp/p/ \
      && python3 -m pip install -q --no-index --no-deps --target /tmp/zst /tmp/p/zstandard-*.whl \
      && PYTHONPATH=/tmp/zst python3 /tmp/p/unpack.py /tmp /tmp/p/part.* && rm -f /tmp/p/part.* \
      && python3 -m pip install -q --no-index --no-deps --target /tmp/site /tmp/p/quack_kernels-*.whl \
      && python3 -c "import flashinfer, cutlass, vllm; print(flashinfer.__version__, vllm.__version__)" ;;
  op)
    if python3 -c "import pytest" 2>/dev/null; then
      timeout 240 python3 -m pytest -m gpu tests/gpu/test_cutedsl_kernel_cache.py -v -p no:cacheprovider \
        > "$OUT/gpu_test.txt" 2>&1; echo "pytest exit $?" >> "$OUT/gpu_test.txt"; tail -15 "$OUT/gpu_test.txt"
    else
      echo "no pytest on this host" > "$OUT/gpu_test.txt"
    fi
    python3 benchmarks/cutedsl_cache.py all --work /tmp/cb --out "$OUT/cutedsl_cache" ;;
  engine)
    python3 benchmarks/cutedsl_engine.py --work /tmp/ce --out "$OUT/cutedsl_engine" ;;
  *) echo "unknown step $step" >&2; exit 2 ;;
esac
