#!/usr/bin/env bash
# Prepare the FlashInfer an engine release pins, for the engine tests on a GPU-less machine that reaches PyPI:
# flashinfer-python and nvidia-cutlass-dsl (with the sibling wheels its extras select: -libs-base, -libs-core,
# -libs-cu12, -libs-cu13) as entries of the shared pool of installed distributions (.ci/dist_pool.py). Each
# version is installed once and hard-linked into every release that pins it (vLLM 0.24.0 and SGLang 0.5.15
# share FlashInfer 0.6.12 and DSL 4.5.2; vLLM 0.33.0 and SGLang 0.5.23 share DSL 4.8.0).
#
#   install_flashinfer.sh WHO FLASHINFER_SPEC [DSL_SPEC]
#       e.g. install_flashinfer.sh "vllm 0.33.0" flashinfer-python==0.7.2.post1 'nvidia-cutlass-dsl[cu13]==4.8.0'
#
# The last line is "pair: PIN..." (exact pins, in the order to link them: the DSL's siblings dependencies
# first, as pip installs them, so that where two list the same path the right copy is left). flashinfer-python
# comes without its extras and dependencies: the tests read its code and its version on CPU; the DSL's wheels
# come whole, so jitguard's check of their files against their RECORD sees a real install.
#
#   JITGUARD_POOL   the pool (default $JITGUARD_CI_ROOT/pool/<interpreter tag>; JITGUARD_CI_ROOT: /tmp/jitguard-ci)
#   PYTHON          the interpreter whose pip installs (default python3)
set -euo pipefail
cd "$(dirname "$0")/.."
. .ci/preparation.sh

[[ $# -ge 2 ]] || { sed -n '2,20p' "$0" >&2; exit 2; }
WHO=$1 FLASHINFER=$2 DSL=${3:-}
PY=${PYTHON:-python3}
POOL=${JITGUARD_POOL:-${JITGUARD_CI_ROOT:-/tmp/jitguard-ci}/pool/$("$PY" .ci/dist_pool.py tag)}
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1
mkdir -p "$POOL"

# What the specs mean today, asked of the index without the lock (a moment each; the answers are kept).
pins() {  # KEY ARGS...: dist_pool.py pins ARGS, remembered in the pool under KEY
    local kept
    kept="$POOL/.pins-$(echo "$*" | sha256sum | cut -c1-16)"
    if [[ "$*" != *==* ]]; then  # a range means something new when a release comes out: never kept
        "$PY" .ci/dist_pool.py pins "$@"
        return
    fi
    if [[ ! -s "$kept" ]]; then
        "$PY" .ci/dist_pool.py pins "$@" > "$kept.$$" && mv "$kept.$$" "$kept"
    fi
    cat "$kept"
}
mapfile -t wanted < <(pins "${FLASHINFER%%[*}")  # extras dropped: flashinfer-python[cu13] is flashinfer-python
if [[ -n "$DSL" ]]; then
    mapfile -t -O "${#wanted[@]}" wanted < <(pins --family nvidia-cutlass-dsl "$DSL")
fi

mapfile -t missing < <("$PY" .ci/dist_pool.py absent "$POOL" "${wanted[@]}")
if [[ ${#missing[@]} -gt 0 ]]; then
    take_lock "$POOL/.lock" "$WHO: FlashInfer"
    mapfile -t missing < <("$PY" .ci/dist_pool.py absent "$POOL" "${wanted[@]}")  # another may have added them
    if [[ ${#missing[@]} -gt 0 ]]; then
        echo "$WHO: installing ${missing[*]} into the shared pool $POOL"
        # --each: the DSL's siblings list some paths with different contents, and one pip run keeps one copy.
        "$PY" .ci/dist_pool.py add --each "$POOL" "${missing[@]}" >&2
    fi
fi
echo "pair: ${wanted[*]}"
