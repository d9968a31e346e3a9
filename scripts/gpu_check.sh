#!/usr/bin/env bash
# One command for a machine with an NVIDIA GPU: set up Python, run the GPU tests, run the CUDA
# benchmarks (ext vs PyTorch cuBLAS/cuDNN vs stock TVM dlight) and write the table.
#
#   bash scripts/gpu_check.sh            # results in $OUT (or ./out): gpu_tests.txt, bench_cuda.{txt,json}
#
# Without network (the lent H200 machines): carry the wheels from scripts/gpu_bundle.sh.
# Environment: PY=<python with apache-tvm 0.27 importable> skips the venv setup; OUT=<dir> for
# results; GPU_CHECK_QUICK=1 for a shorter benchmark. Budget: < 8 minutes (each step has a
# timeout; a step that is missing or fails is reported and the rest still runs). Exit status:
# non-zero when the GPU tests fail or no GPU is visible.
set -euo pipefail

cd "$(dirname "$0")/.."
OUT="${OUT:-$PWD/out}"
mkdir -p "$OUT"
START=$(date +%s)
log() { echo "[gpu_check $(( $(date +%s) - START ))s] $*"; }

if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
    log "no NVIDIA GPU visible (nvidia-smi missing or failing): nothing to check"
    exit 2
fi
nvidia-smi | tee "$OUT/nvidia-smi.txt"

# -- Python: $PY, else the repo's .venv, else python3 (+ wheels from scripts/gpu_bundle.sh), else a
#    fresh venv from pyproject.toml (needs network) ---------------------------------------------
has_tvm() { "$1" -c "import tvm, numpy, pytest" >/dev/null 2>&1; }
install_bundle() {  # offline: wheels carried in .gpu_whl1 (or /tmp/.gpu_whl1) and .gpu_whl2
    local p1=.gpu_whl1; [[ -d $p1 ]] || p1=/tmp/.gpu_whl1
    [[ -d $p1 && -d .gpu_whl2 ]] || return 1
    local name; name=$(basename "$(ls "$p1"/*.part00)" .part00)
    cat "$p1/$name.part00" ".gpu_whl2/$name.part01" > "/tmp/$name"
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
        "/tmp/$name" .gpu_whl2/apache_tvm_ffi-*.whl
    export PYTHONPATH="/tmp/site:$PWD${PYTHONPATH:+:$PYTHONPATH}"
}
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
if [[ -n "${PY:-}" ]] && has_tvm "$PY"; then
    log "using PY=$PY"
elif [[ -x .venv/bin/python ]] && has_tvm .venv/bin/python; then
    PY=.venv/bin/python
    log "using the repo's .venv"
elif has_tvm python3 || { install_bundle && has_tvm python3; }; then
    PY=python3
    log "using python3 ($(python3 -c 'import tvm; print(tvm.__file__)'))"
else
    BASE=$(command -v python3.11 || command -v python3)
    log "creating .venv-gpu with $BASE"
    "$BASE" -m venv .venv-gpu
    PY=.venv-gpu/bin/python
    timeout 300 "$PY" -m pip install -q -e ".[test]" || log "pip install of the project failed (offline?)"
fi
has_tvm "$PY" || { log "no Python with apache-tvm available: cannot continue"; exit 3; }
"$PY" -c "import ext" || { log "ext does not import"; exit 3; }

# PyTorch with CUDA (the cuBLAS/cuDNN baseline): optional, PyPI's default Linux wheel is a CUDA build
if ! "$PY" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" >/dev/null 2>&1; then
    log "installing CUDA PyTorch for the baselines (optional)"
    timeout 240 "$PY" -m pip install -q torch || log "no CUDA PyTorch: baselines will say so"
fi
"$PY" - <<'EOF' | tee "$OUT/versions.txt" || true
import tvm, tvm_ffi, numpy
print("tvm", tvm.__version__, "tvm_ffi", tvm_ffi.__version__, "numpy", numpy.__version__)
print("tvm sees cuda:", tvm.cuda(0).exist, tvm.cuda(0).compute_version if tvm.cuda(0).exist else "")
try:
    import torch
    print("torch", torch.__version__, "cuda", torch.cuda.is_available())
except ImportError:
    print("torch not installed")
EOF

# -- GPU tests (numerics of every CUDA candidate) plus the CUDA build tests ---------------------
TEST_RC=0
log "GPU tests"
timeout 240 "$PY" -m pytest -q -rs tests/test_cuda_matmul.py tests/test_cuda_norm.py tests/test_cuda_conv2d.py \
    2>&1 | tee "$OUT/gpu_tests.txt" || TEST_RC=$?
if grep -q "needs an NVIDIA GPU" "$OUT/gpu_tests.txt"; then
    log "WARNING: GPU tests were skipped although nvidia-smi works (TVM cannot see the GPU?)"
    if [[ $TEST_RC -eq 0 ]]; then TEST_RC=4; fi
fi

# -- benchmarks -----------------------------------------------------------------------------------
QUICK=()
[[ "${GPU_CHECK_QUICK:-0}" == "1" ]] && QUICK=(--quick)
ELAPSED=$(( $(date +%s) - START ))
BUDGET=$(( 450 - ELAPSED ))   # whole script < 8 min
if (( BUDGET < 60 )); then
    log "only ${BUDGET}s left: quick benchmark"
    QUICK=(--quick); BUDGET=60
fi
log "benchmarks (${BUDGET}s budget)"
timeout "$BUDGET" "$PY" scripts/bench_cuda.py "${QUICK[@]}" --stock-timeout 60 --json "$OUT/bench_cuda.json" \
    2>&1 | tee "$OUT/bench_cuda.txt" || log "benchmark stopped early (timeout or error): partial table above"

log "done: tests rc=$TEST_RC; results in $OUT"
exit "$TEST_RC"
