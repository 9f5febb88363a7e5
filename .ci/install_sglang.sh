#!/usr/bin/env bash
# Prepare the REAL SGLang code of released versions, each with the FlashInfer it pins, for tests/real/sglang on
# a GPU-less machine that reaches PyPI.
#
# For each version: the wheel from PyPI (downloaded, read, deleted: 13 MB for 0.5.15, 39 MB for 0.5.23), its
# sources and .dist-info extracted to $ROOT/<version>/src (48-110 MB; the compiled extensions are left out),
# and a venv at $ROOT/<version>/venv that sees this Python's packages (the CPU torch, jitguard) and holds only
# what SGLang's plugin loader, server arguments and linear-attention modules import (.ci/sglang_wheel.py: ~230
# MB installed, ~75 MB downloaded) plus triton (imported by every SGLang module: 188 MB download, 640 MB
# installed), and hard links to the flashinfer-python and nvidia-cutlass-dsl wheels the release pins, from the
# pool the vLLM releases share (.ci/install_flashinfer.sh: SGLang 0.5.15 and vLLM 0.24.0 pin the same
# FlashInfer; jitguard's facts read its version, the DSL's files and its era). torchvision cannot load next to a
# CPU torch: a stand-in is put on the venv's start-up path (.ci/torchvision_standin.py says why and what it does).
# The versions are prepared in parallel, each under its own lock ($ROOT/<version>.lock: a second process
# preparing the same version says whom it waits for, then finds it ready). Idempotent and cache-friendly: a
# version whose 'ready' stamp matches these scripts is skipped.
#
#   JITGUARD_SGLANG_VERSIONS   space-separated versions (default: one per layout and FlashInfer era, docs/sglang.md)
#   JITGUARD_SGLANG_ROOT       where to put them (default $JITGUARD_CI_ROOT/sglang, JITGUARD_CI_ROOT /tmp/jitguard-ci; never inside the repo)
#   PYTHON                     the Python whose packages the venvs see (default python3; a venv's is fine)
set -euo pipefail
cd "$(dirname "$0")/.."
. .ci/preparation.sh

VERSIONS=${JITGUARD_SGLANG_VERSIONS:-"0.5.15 0.5.23"}
ROOT=$(realpath -m "${JITGUARD_SGLANG_ROOT:-${JITGUARD_CI_ROOT:-/tmp/jitguard-ci}/sglang}")
TRITON=triton==3.6.0  # what torch 2.11 (SGLang 0.5.15's) brings; only imported here, never run
PY=${PYTHON:-python3}
# The venvs see the packages of this Python ($PY, e.g. CI's fresh venv) through a .pth: a copy made for another
# Python (a venv since deleted) is stale, so that Python's prefix is part of the stamp.
PARENT=$("$PY" -c 'import sys; print(sys.prefix)' 2>/dev/null || echo unknown)
STAMP=$( (cat .ci/install_sglang.sh .ci/sglang_wheel.py .ci/vllm_wheel.py .ci/torchvision_standin.py \
    .ci/dist_pool.py .ci/install_flashinfer.sh; echo "$PARENT") | sha256sum | cut -c1-16)
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1

if ! "$PY" -c 'import importlib.metadata as m; m.version("torch"); m.version("jitguard"); import packaging' 2>/dev/null; then
    echo "install_sglang.sh: install torch (the CPU build) and jitguard first: the SGLang test environments use them" >&2
    exit 2
fi
export JITGUARD_POOL=${JITGUARD_POOL:-$(dirname "$ROOT")/pool/$("$PY" .ci/dist_pool.py tag)}
mkdir -p "$ROOT"

# triton for all versions, in one place (a CPU torch does not bring it; every SGLang module imports it).
shared="$ROOT/shared/${TRITON//==/-}"
if [[ ! -f "$shared/ready" ]]; then
    (
        take_lock "$shared.lock" "sglang: $TRITON"
        if [[ ! -f "$shared/ready" ]]; then
            rm -rf "$shared"
            echo "sglang: installing $TRITON for every version (pip's output in $shared.log)"
            "$PY" -m pip install -q --no-deps --target "$shared" "$TRITON" >"$shared.log" 2>&1
            touch "$shared/ready"
        fi
    )
fi

# One version, in a subshell with `set -e` in force. Progress lines on stdout; pip's output in $log.
prepare() {
    local version=$1 dir=$ROOT/$1 log=$ROOT/$1.log started=$SECONDS
    say() { echo "sglang $version: [$((SECONDS - started)) s] $*"; }
    take_lock "$ROOT/$version.lock" "sglang $version"
    if [[ -f "$dir/ready" && "$(cat "$dir/ready")" == "$STAMP" ]]; then
        say "ready: $dir (cached)"
        return
    fi
    : > "$log"
    rm -rf "$dir"
    mkdir -p "$dir/wheel"
    say "downloading the wheel from PyPI"
    "$PY" -m pip download -q --no-deps "sglang==$version" -d "$dir/wheel" >>"$log" 2>&1
    local wheel site flashinfer pair
    wheel=$(ls "$dir"/wheel/sglang-*.whl)
    (cd .ci && "$PY" sglang_wheel.py requirements "$wheel") > "$dir/requirements.txt"
    (cd .ci && "$PY" vllm_wheel.py pair "$wheel") > "$dir/flashinfer.txt"
    (cd .ci && "$PY" sglang_wheel.py extract "$wheel" "$dir/src") >>"$log"
    rm -rf "$dir/wheel"

    "$PY" -m venv --system-site-packages "$dir/venv"
    site=$("$dir/venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
    # --system-site-packages sees the base interpreter's packages; when $PY is itself a venv, its packages
    # (torch, jitguard and its entry points) are made visible the same way, after the venv's own.
    "$PY" - "$site/_jitguard_parent.pth" <<'EOF'
import site, sys, sysconfig
paths = {sysconfig.get_paths()[k] for k in ("purelib", "platlib")}
if sys.prefix != sys.base_prefix:
    with open(sys.argv[1], "w") as f:
        f.write("".join(f"import site; site.addsitedir({p!r})\n" for p in sorted(paths)))
EOF
    echo "$shared" > "$site/_jitguard_triton.pth"
    cp .ci/torchvision_standin.py "$site/"
    echo "import torchvision_standin" > "$site/torchvision_standin.pth"
    # The machine's torch stands in; a dependency that wants another torch must fail here, not fetch one.
    "$PY" -c 'import importlib.metadata as m; print("torch==" + m.version("torch"))' > "$dir/constraints.txt"
    say "installing what its plugin loader, server arguments and linear-attention modules import"
    "$dir/venv/bin/python" -m pip install -q -r "$dir/requirements.txt" -c "$dir/constraints.txt" >>"$log" 2>&1

    mapfile -t flashinfer < "$dir/flashinfer.txt"
    say "its FlashInfer: ${flashinfer[*]}"
    bash .ci/install_flashinfer.sh "sglang $version" "${flashinfer[@]}" 2>>"$log" | tee "$dir/flashinfer.out" \
        | grep -v '^pair: ' || true  # its lines name the release already
    pair=$(sed -n 's/^pair: //p' "$dir/flashinfer.out")
    [[ -n "$pair" ]] || { echo "install_flashinfer.sh failed: ${flashinfer[*]}" >>"$log"; exit 1; }
    # In the venv's own site directory, so they come before this Python's FlashInfer and DSL (the .pth of the
    # DSL's wheel puts its packages on the path, as in a user's install).
    # shellcheck disable=SC2086  # one pin a word
    "$PY" .ci/dist_pool.py link "$JITGUARD_POOL" "$site" $pair >>"$log"

    # The proof that this worked: SGLang's plugin loader and its linear-attention choice import, with the
    # FlashInfer it pins.
    PYTHONPATH="$dir/src" "$dir/venv/bin/python" - "$pair" >>"$log" 2>&1 <<'EOF'
import importlib, importlib.metadata, sys
importlib.import_module("sglang.srt.plugins")
utils = importlib.import_module("sglang.srt.layers.attention.linear.utils")
for name in ("resolve_linear_attn_backends", "initialize_linear_attn_config"):
    if hasattr(utils, name):
        print(f"  imports sglang.srt.plugins and {utils.__name__}.{name}")
        break
else:
    raise SystemExit("no linear-attention backend choice found in this SGLang version")
for pin in sys.argv[1].split():
    name, version = pin.split("==")
    if importlib.metadata.version(name) != version:
        raise SystemExit(f"{name} {importlib.metadata.version(name)} is seen, not the pinned {version}")
EOF
    echo "$STAMP" > "$dir/ready"
    say "ready: $dir (prepared in $((SECONDS - started)) s, $(du -sh "$dir" | cut -f1) besides the pool)"
}

# shellcheck disable=SC2086  # one version a word
prepare_all sglang "$ROOT" $VERSIONS
