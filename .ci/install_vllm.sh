#!/usr/bin/env bash
# Prepare the REAL vLLM code of released versions for tests/real/vllm on a GPU-less machine that reaches PyPI.
#
# For each version: the wheel from PyPI (downloaded, read, deleted: ~250-340 MB, seconds), its Python sources
# and .dist-info extracted to $ROOT/<version>/src (30-60 MB; the compiled extensions are left out: they need a
# CUDA torch), and a venv at $ROOT/<version>/venv that sees this machine's packages (the CPU torch, jitguard)
# with vLLM's own pure-Python dependencies installed from the wheel's metadata (~700 MB, ~1 min).
# Idempotent and cache-friendly: a version whose 'ready' stamp matches this script is skipped.
#
#   JITGUARD_VLLM_VERSIONS   space-separated versions (default: one per GDN layer layout, see docs/vllm.md)
#   JITGUARD_VLLM_ROOT       where to put them (default /tmp/jitguard-ci/vllm; never inside the repo)
set -euo pipefail
cd "$(dirname "$0")/.."

VERSIONS=${JITGUARD_VLLM_VERSIONS:-"0.21.0 0.33.0"}
ROOT=${JITGUARD_VLLM_ROOT:-/tmp/jitguard-ci/vllm}
PY=${PYTHON:-python3}
STAMP=$(cat .ci/install_vllm.sh .ci/vllm_wheel.py | sha256sum | cut -c1-16)
export PIP_DISABLE_PIP_VERSION_CHECK=1

if ! "$PY" -c 'import importlib.metadata as m; m.version("torch"); import packaging' 2>/dev/null; then
    echo "install_vllm.sh: install torch (the CPU build) and jitguard first: the vLLM test environments use them" >&2
    exit 2
fi

# One preparer at a time (parallel test runs share $ROOT); a second one waits, then finds the versions ready.
mkdir -p "$ROOT"
exec 9>"$ROOT/.lock"
flock 9

for version in $VERSIONS; do
    dir="$ROOT/$version"
    if [[ -f "$dir/ready" && "$(cat "$dir/ready")" == "$STAMP" ]]; then
        echo "vllm $version: ready at $dir (cached)"
        continue
    fi
    started=$SECONDS
    rm -rf "$dir"
    mkdir -p "$dir/wheel"
    "$PY" -m pip download -q --no-deps "vllm==$version" -d "$dir/wheel"
    wheel=$(ls "$dir"/wheel/vllm-*.whl)
    "$PY" .ci/vllm_wheel.py requirements "$wheel" > "$dir/requirements.txt"
    xgrammar=$("$PY" .ci/vllm_wheel.py pin "$wheel" xgrammar)
    "$PY" .ci/vllm_wheel.py extract "$wheel" "$dir/src" >/dev/null
    rm -rf "$dir/wheel"

    "$PY" -m venv --system-site-packages "$dir/venv"
    # The machine's torch stands in; a dependency that wants another torch must fail here, not fetch a CUDA one.
    "$PY" -c 'import importlib.metadata as m; print("torch==" + m.version("torch"))' > "$dir/constraints.txt"
    "$dir/venv/bin/python" -m pip install -q -r "$dir/requirements.txt" -c "$dir/constraints.txt"
    # vLLM imports xgrammar at module level; its dependencies (torch, triton) are not wanted here.
    "$dir/venv/bin/python" -m pip install -q --no-deps "$xgrammar"

    # The proof that this worked: vLLM's GDN layer module imports with the CPU torch.
    PYTHONPATH="$dir/src" "$dir/venv/bin/python" - <<'EOF'
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
    echo "$STAMP" > "$dir/ready"
    echo "vllm $version: ready at $dir ($((SECONDS - started)) s, $(du -sh "$dir" | cut -f1))"
done
