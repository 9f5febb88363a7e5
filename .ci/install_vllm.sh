#!/usr/bin/env bash
# Prepare the REAL vLLM code of released versions, each with the FlashInfer it pins, for tests/real/vllm on a
# GPU-less machine that reaches PyPI.
#
# For each version, layered on the interpreter that runs the tests ($PYTHON, default python3; a venv's or not):
#   $ROOT/<version>/src          the wheel's Python sources and .dist-info (the wheel, ~250-340 MB, is downloaded,
#                                read and deleted; the compiled extensions are left out: they need a CUDA torch)
#   $ROOT/<version>/deps-<env>   hard links to what this release needs and this interpreter lacks: vLLM's
#                                pure-Python dependencies, and the flashinfer-python and nvidia-cutlass-dsl wheels
#                                the release pins (.ci/install_flashinfer.sh). torch, jitguard and everything
#                                else this interpreter has are used as they are, never installed again. <env>
#                                is a key for the interpreter and its packages, so an identical fresh venv reuses
#                                them.
# Tests run this interpreter with PYTHONPATH=<src>:<deps>:<the DSL's package dir> (the last line of each version).
#
# What releases share is prepared once: every distribution (name==version) is installed once into the pool of
# .ci/dist_pool.py (next to $ROOT, or $JITGUARD_POOL), and a release's deps are hard links to its entries; the
# second release installs only what the first did not have. The versions are prepared in parallel (downloads
# and pip's resolution wait on the network); installing into the pool takes its lock, one preparer at a time.
#
# Why not a venv per version: a venv made from inside a venv with --system-site-packages sees the base Python's
# site-packages, not the outer venv's, so torch and jitguard vanish (or get installed again, 12 GB with the
# CUDA torch). The --target layer sees exactly what the running interpreter sees.
#
# Each version is prepared on its own, under its own lock ($ROOT/<version>.lock: a second process preparing the
# same version says whom it waits for, then finds it ready): one that fails does not stop the others (exit 1 at
# the end, the pip output in $ROOT/<version>.log). Cached: a version whose 'ready' stamps match is a moment's work.
#
#   JITGUARD_VLLM_VERSIONS   space-separated versions (default: one per GDN layout and FlashInfer era, docs/vllm.md)
#   JITGUARD_VLLM_ROOT       where to put them (default $JITGUARD_CI_ROOT/vllm, JITGUARD_CI_ROOT /tmp/jitguard-ci; never inside the repo)
set -euo pipefail
cd "$(dirname "$0")/.."
. .ci/preparation.sh

VERSIONS=${JITGUARD_VLLM_VERSIONS:-"0.21.0 0.24.0 0.26.0 0.30.0 0.33.0"}
ROOT=$(realpath -m "${JITGUARD_VLLM_ROOT:-${JITGUARD_CI_ROOT:-/tmp/jitguard-ci}/vllm}")
PY=${PYTHON:-python3}
# The sources depend on how the wheel is read; the dependencies on every step.
SRC_STAMP=$(sha256sum < .ci/vllm_wheel.py | cut -c1-16)
STAMP=$(cat .ci/install_vllm.sh .ci/vllm_wheel.py .ci/dist_pool.py .ci/install_flashinfer.sh | sha256sum | cut -c1-16)
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1
unset PYTHONPATH  # what the interpreter has on its own decides what is missing

if ! "$PY" -c 'import importlib.metadata as m; m.version("torch"); m.version("jitguard"); import packaging' 2>/dev/null; then
    echo "install_vllm.sh: $PY has no torch or jitguard: run 'pip install -e .[test]' first (the vLLM test environments use both)" >&2
    exit 2
fi
ENV_ID=$("$PY" .ci/vllm_wheel.py env-id)
TORCH=$("$PY" -c 'import importlib.metadata as m; print(m.version("torch"))')
export JITGUARD_POOL=${JITGUARD_POOL:-$(dirname "$ROOT")/pool/$("$PY" .ci/dist_pool.py tag)}
mkdir -p "$ROOT" "$JITGUARD_POOL"

# One version, in a subshell with `set -e` in force. Progress lines on stdout; pip's output in $log.
prepare() {
    local version=$1 dir=$ROOT/$1 log=$ROOT/$1.log started=$SECONDS
    local src=$dir/src deps=$dir/deps-$ENV_ID
    say() { echo "vllm $version: [$((SECONDS - started)) s] $*"; }
    take_lock "$ROOT/$version.lock" "vllm $version"
    : > "$log"

    if [[ ! -f "$src/ready" || "$(cat "$src/ready")" != "$SRC_STAMP" ]]; then
        rm -rf "$dir"
        mkdir -p "$dir/wheel"
        say "downloading the wheel from PyPI (~250-340 MB, deleted once read)"
        "$PY" -m pip download --no-deps "vllm==$version" -d "$dir/wheel" >>"$log" 2>&1
        local wheel
        wheel=$(ls "$dir"/wheel/vllm-*.whl)
        say "extracting its Python sources ($(du -h "$wheel" | cut -f1) wheel)"
        "$PY" .ci/vllm_wheel.py requirements "$wheel" > "$dir/requirements.txt"
        "$PY" .ci/vllm_wheel.py pin "$wheel" xgrammar > "$dir/xgrammar.txt"
        "$PY" .ci/vllm_wheel.py pair "$wheel" > "$dir/flashinfer.txt"
        "$PY" .ci/vllm_wheel.py extract "$wheel" "$src" >>"$log"
        rm -rf "$dir/wheel"
        echo "$SRC_STAMP" > "$src/ready"
    fi

    if [[ ! -f "$deps/ready" || "$(cat "$deps/ready")" != "$STAMP" ]]; then
        local staging=$deps.partial
        rm -rf "$staging" "$deps"
        mkdir -p "$staging"
        say "resolving its dependencies against $PY (torch $TORCH stays)"
        # The interpreter's torch stands in; a dependency that wants another torch must fail here, not fetch one.
        echo "torch==$TORCH" > "$staging/constraints.txt"
        "$PY" -m pip install --dry-run --report "$staging/report.json" \
            -r "$dir/requirements.txt" -c "$staging/constraints.txt" >>"$log" 2>&1
        "$PY" .ci/vllm_wheel.py missing "$staging/report.json" > "$staging/missing.txt"
        # vLLM imports xgrammar at module level; its dependencies (torch, triton) are not wanted here.
        "$PY" .ci/dist_pool.py pins "$(cat "$dir/xgrammar.txt")" >> "$staging/missing.txt" 2>>"$log"
        mapfile -t flashinfer < "$dir/flashinfer.txt"
        say "its FlashInfer: ${flashinfer[*]}"
        bash .ci/install_flashinfer.sh "vllm $version" "${flashinfer[@]}" 2>>"$log" | tee "$staging/flashinfer.out" \
            | grep -v '^pair: ' || true  # its lines name the release already
        local pair
        pair=$(sed -n 's/^pair: //p' "$staging/flashinfer.out")
        [[ -n "$pair" ]] || { echo "install_flashinfer.sh failed: ${flashinfer[*]}" >>"$log"; exit 1; }

        mapfile -t absent < <("$PY" .ci/dist_pool.py absent "$JITGUARD_POOL" $(cat "$staging/missing.txt"))
        if [[ ${#absent[@]} -gt 0 ]]; then
            (
                take_lock "$JITGUARD_POOL/.lock" "vllm $version: dependencies"
                mapfile -t absent < <("$PY" .ci/dist_pool.py absent "$JITGUARD_POOL" $(cat "$staging/missing.txt"))
                if [[ ${#absent[@]} -gt 0 ]]; then
                    say "installing ${#absent[@]} of its $(wc -l < "$staging/missing.txt") packages into the shared pool (the others are there)"
                    "$PY" .ci/dist_pool.py add "$JITGUARD_POOL" "${absent[@]}" >>"$log" 2>&1
                fi
            )
        fi
        say "linking $(wc -l < "$staging/missing.txt") packages it needs and $PY lacks, and its FlashInfer"
        # shellcheck disable=SC2086  # one pin a word
        "$PY" .ci/dist_pool.py link "$JITGUARD_POOL" "$staging/site" $(cat "$staging/missing.txt") $pair >>"$log"

        # The proof that this worked: vLLM's GDN layer module imports with this interpreter's torch.
        say "importing its GDN layer"
        PYTHONPATH=$(layers "$src" "$staging/site") "$PY" - >>"$log" 2>&1 <<'EOF'
import importlib, sys
for name in ("vllm.model_executor.layers.mamba.gdn.qwen_gdn_linear_attn",  # 0.22+
             "vllm.model_executor.layers.mamba.gdn_linear_attn",  # 0.19-0.21
             "vllm.model_executor.models.qwen3_next"):  # 0.17-0.18
    try:
        module = importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if not exc.name or not name.startswith(exc.name):
            raise
        continue
    if name.endswith("qwen3_next") and "ChunkGatedDeltaRule" not in vars(module):
        continue
    print(f"  imports {name}")
    break
else:
    sys.exit("no GDN prefill backend choice found in this vLLM version")
EOF
        mv "$staging/site" "$deps"
        mv "$staging"/*.txt "$staging/report.json" "$deps/"
        rm -rf "$staging"
        echo "$STAMP" > "$deps/ready"
        say "prepared in $((SECONDS - started)) s ($(du -sh "$src" | cut -f1) sources, $(du -sh "$deps" | cut -f1) dependencies, hard links into the pool)"
    fi
    touch "$deps"  # most recently used first; the dependencies of other environments beyond the last 3 go
    ls -dt "$dir"/deps-*/ 2>/dev/null | tail -n +4 | xargs -r rm -rf
    say "ready: PYTHONPATH=$(layers "$src" "$deps")"
}

# PYTHONPATH for the sources and a deps directory: the DSL's own packages ('cutlass') live one level down,
# where its .pth file would put them in a site directory (PYTHONPATH entries do not read .pth files):
# nvidia_cutlass_dsl/dsl_packages (4.6+) or nvidia_cutlass_dsl/python_packages (4.4, 4.5).
layers() {
    local src=$1 deps=$2 path=$1:$2 sub
    for sub in dsl_packages python_packages; do
        [[ -d "$deps/nvidia_cutlass_dsl/$sub" ]] && path+=":$deps/nvidia_cutlass_dsl/$sub"
    done
    echo "$path"
}

# shellcheck disable=SC2086  # one version a word
prepare_all vllm "$ROOT" $VERSIONS
