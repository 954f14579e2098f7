#!/usr/bin/env bash
# Everything issue 25 asks of a lent GPU, in one device call (the budget is 15 minutes a session, starts included):
#   run(command="bash bench/gpu_check.sh", timeout_s=570)   (about 8 minutes on an H100; logs come back if cut)
# JAX_ROWS=0 leaves out JAX's float32 and bf16 rows (its TF32 row stays); TORCH_ROWS=0 leaves out torch's forms,
# the TF32 rows and the profile; TESTS_K=torch runs that engine's GPU test.
# The device machine's image already holds torch, JAX (CUDA), Flax, Optax, tqdm, scikit-learn, matplotlib and
# Pillow, and nothing can be fetched there, so multidev and the two engines go in without their dependencies.
# Every log lands under $OUT (it comes back even when the call runs out of time). Extra arguments go to the
# benchmark: a dry run on a machine without a GPU, `bash bench/gpu_check.sh --train 512 --test 256 --epochs 1`,
# runs the same steps on CPU devices.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$(mktemp -d)}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
PY=${PYTHON:-python3}
stamp() { echo "== $(date +%T) $*" | tee -a "$OUT/gpu_check.log"; }
rows() { [ -s "$OUT/fashion_shape.md" ] && echo 4 || echo 1; }  # the table's title and header once

stamp "install (no dependencies, no index)"
if [ -z "${VIRTUAL_ENV:-}" ] || ! $PY -c "import multidev_torch, multidev_jax" 2>/dev/null; then
  $PY -m pip install -q --no-deps --no-build-isolation --no-index -e . -e backends/torch -e backends/jax \
    2>&1 | tail -3 | tee -a "$OUT/gpu_check.log"
fi
$PY -c "import multidev_torch, multidev_jax" || { stamp "multidev's engines did not install: stopped"; exit 1; }
{ nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv 2>&1 || echo "no nvidia-smi"
  $PY -c "import torch, jax, flax, optax, numpy; print('torch', torch.__version__, 'cuda', torch.version.cuda,
'| jax', jax.__version__, jax.devices(), '| flax', flax.__version__, '| optax', optax.__version__,
'| numpy', numpy.__version__)"
  $PY -m multidev backends; } 2>&1 | tee -a "$OUT/gpu_check.log"

stamp "GPU against CPU (tests/test_gpu.py)"
timeout 100 $PY -m pytest -q -p no:cacheprovider tests/test_gpu.py ${TESTS_K:+-k "$TESTS_K"} 2>&1 | tail -15 \
  | tee -a "$OUT/gpu_check.log"

if [ "${JAX_ROWS:-1}" = 1 ]; then
  stamp "the book's job shape: JAX, float32 and bf16, BatchNorm's sums as matrix-vector products and as reductions"
  $PY bench/bench_fashion_shape.py --backends jax --precisions fp32,bf16 --epochs 2 --worker-timeout 90 \
    --jax-env "default;MULTIDEV_JAX_SUMS=reduce" "$@" 2>&1 \
    | tee -a "$OUT/fashion_shape.md" | tee -a "$OUT/gpu_check.log"
fi
[ "${TORCH_ROWS:-1}" = 1 ] || { stamp "done (TORCH_ROWS=0); logs in $OUT"; exit 0; }
stamp "the book's job shape: torch in each of its GPU forms (multidev_torch.gpu), float32 and bf16"
$PY bench/bench_fashion_shape.py --backends torch --precisions fp32,bf16 --epochs 2 --worker-timeout 60 \
  --torch-forms none,benchmark,channels_last,benchmark+channels_last "$@" 2>&1 | tail -n +"$(rows)" \
  | tee -a "$OUT/fashion_shape.md" | tee -a "$OUT/gpu_check.log"
stamp "float32 with the TF32 opt-in (--tf32)"
$PY bench/bench_fashion_shape.py --backends torch,jax --precisions fp32 --tf32 --epochs 2 --worker-timeout 60 \
  "$@" 2>&1 | tail -n +4 | tee -a "$OUT/fashion_shape.md" | tee -a "$OUT/gpu_check.log"
stamp "torch: the host's share of a bf16 step (bench/profile_torch.py, the default forms)"
timeout 60 $PY bench/profile_torch.py --precision bf16 2>&1 | grep -v "^USDT\|^STAGE" | tee "$OUT/profile_torch.txt" \
  | head -30 | tee -a "$OUT/gpu_check.log"
stamp "done; logs in $OUT"
