#!/usr/bin/env bash
# Everything issue 25 asks of a lent GPU, in one device call (the budget is 15 minutes a session, starts included):
#   run(command="bash bench/gpu_check.sh", timeout_s=570)   (about 8 minutes on an H100; logs come back if cut)
# JAX_ROWS=0 leaves out JAX's float32 and bf16 rows (its TF32 row stays); TORCH_ROWS=0 leaves out torch's forms,
# the TF32 rows and the profile; MODEL_ROWS=0 the model table (ResNet-50, MobileNetV2 and the ViT, each engine
# against its loop, with the share of the float32 peak; MODELS_ARGS adds to its options); TESTS_K=torch runs that
# engine's GPU test.
# The device machine's image already holds torch, JAX (CUDA), Flax, Optax, tqdm, scikit-learn, matplotlib and
# Pillow, and nothing can be fetched there, so multidev and the two engines go in without their dependencies.
# Every log lands under $OUT (it comes back even when the call runs out of time), and the figures as result files
# under $OUT/results/<the GPU's kind>/ with the page they make, $OUT/benchmarks.md: copy the result files to
# bench/results/ and run `python -m bench.summary`. Extra arguments go to the benchmark: a dry run on a machine
# without a GPU, `bash bench/gpu_check.sh --train 512 --test 256 --epochs 1` (or `--smoke`), runs the same steps on
# CPU devices.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$(mktemp -d)}
mkdir -p "$OUT"
# JAX takes 75% of the GPU's memory at its start unless told not to: the tests' processes share the one GPU.
export PYTHONUNBUFFERED=1 BENCH_RESULTS="$OUT/results" XLA_PYTHON_CLIENT_PREALLOCATE=false
PY=${PYTHON:-python3}
stamp() { echo "== $(date +%T) $*" | tee -a "$OUT/gpu_check.log"; }

stamp "install (no dependencies, no index)"
if [ -z "${VIRTUAL_ENV:-}" ] || ! $PY -c "import multidev_torch, multidev_jax" 2>/dev/null; then
  $PY -m pip install -q --no-deps --no-build-isolation --no-index -e . -e backends/torch -e backends/jax \
    2>&1 | tail -3 | tee -a "$OUT/gpu_check.log"
fi
$PY -c "import multidev_torch, multidev_jax" || { stamp "multidev's engines did not install: stopped"; exit 1; }
{ nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv 2>&1 || echo "no nvidia-smi"
  $PY -m bench.harness
  $PY -m multidev backends; } 2>&1 | tee -a "$OUT/gpu_check.log"

stamp "GPU against CPU (tests/test_gpu.py)"
timeout 100 $PY -m pytest -q -p no:cacheprovider -n 0 tests/test_gpu.py ${TESTS_K:+-k "$TESTS_K"} 2>&1 | tail -15 \
  | tee -a "$OUT/gpu_check.log"

if [ "${MODEL_ROWS:-1}" = 1 ]; then
  stamp "the model table on the GPU: torch and JAX, each against its hand-written loop (bench_models --gpu)"
  timeout "${MODELS_TIMEOUT:-400}" $PY -m bench.bench_models --gpu --engines torch,jax --batch 256 --rounds 1 \
    --warmup 3 --steps 20 --repeats 3 --timeout 150 ${MODELS_ARGS:-} 2>&1 | tee -a "$OUT/gpu_check.log"
fi

if [ "${JAX_ROWS:-1}" = 1 ]; then
  stamp "the book's job shape: JAX, float32 and bf16, BatchNorm's sums as matrix-vector products and as reductions"
  $PY -m bench.bench_fashion_shape --backends jax --precisions fp32,bf16 --epochs 2 --worker-timeout 90 \
    --jax-env "default;MULTIDEV_JAX_SUMS=reduce" --label jax "$@" 2>&1 | tee -a "$OUT/gpu_check.log"
fi
finish() { $PY -m bench.summary --results "$OUT/results" --out "$OUT/benchmarks.md" 2>&1 | tee -a "$OUT/gpu_check.log"
           stamp "done$1; logs in $OUT"; }
[ "${TORCH_ROWS:-1}" = 1 ] || { finish " (TORCH_ROWS=0)"; exit 0; }
stamp "the book's job shape: torch in each of its GPU forms, float32 and bf16"
$PY -m bench.bench_fashion_shape --backends torch --precisions fp32,bf16 --epochs 2 --worker-timeout 60 \
  --torch-forms none,benchmark,channels_last,benchmark+channels_last,channels_last+cudagraphs \
  --label torch-forms "$@" 2>&1 \
  | tee -a "$OUT/gpu_check.log"
stamp "float32 with the TF32 opt-in (--tf32)"
$PY -m bench.bench_fashion_shape --backends torch,jax --precisions fp32 --tf32 --epochs 2 --worker-timeout 60 \
  --label tf32 "$@" 2>&1 | tee -a "$OUT/gpu_check.log"
stamp "torch: the host's share of a bf16 step (bench.profile_torch, the default forms)"
timeout 60 $PY -m bench.profile_torch --precision bf16 2>&1 | grep -v "^USDT\|^STAGE" | tee "$OUT/profile_torch.txt" \
  | tail -20 | tee -a "$OUT/gpu_check.log"
finish ""
