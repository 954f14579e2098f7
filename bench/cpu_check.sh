#!/usr/bin/env bash
# Issue 25's CPU figures on this machine's CPU in one command, for a session on a CPU kind not yet measured:
#   bash bench/cpu_check.sh            # about 20 minutes on 2 cores; nothing else should run meanwhile
# 1. bench_jax: the JAX engine against the hand-written Flax + Optax loop and Keras 3, 1 and 2 devices
#    (target: >= 1.1 of both), and the forms the engine's measuring chose on this CPU;
# 2. bench_engines: every engine's samples/s and share of this machine's peak (target: none above 100%);
# 3. bench_processes: 2 processes x 1 device against 1 process x 2 devices (target: >= 0.9);
# 4. the quick suite's time and peak memory (README: at most 6 minutes, under 4 GB).
# Run it from an activated virtual environment with the tested set (README); Keras comes from the JAX engine's
# extra. Each part's output goes to the terminal and to $OUT (default: a new folder under /tmp), its figures to
# bench/results/<this CPU's kind>/ (then `python -m bench.summary` for docs/design/benchmarks.md); QUICK=1 runs
# each part at its smallest (--smoke, figures in a temporary folder), to check the script itself.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$(mktemp -d /tmp/cpu-check.XXXX)}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 KERAS_BACKEND=jax
stamp() { echo "== $(date '+%F %T') $*" | tee -a "$OUT/summary.md"; }
part() { local name=$1; shift; stamp "$name: $*"; "$@" 2>&1 | tee "$OUT/$name.log"; }
last_table() { awk '/^\|/ { block = block $0 "\n"; next } { if (block != "") last = block; block = "" }
                    END { if (block != "") last = block; printf "%s", last }' "$1"; }

if [ "${QUICK:-0}" = 1 ]; then
  JAX=(--smoke); ENGINES=(--smoke); PROCESSES=(--smoke)
else
  JAX=(--devices 1,2 --steps 5 --rounds 2); ENGINES=(--backends torch,jax,mxnet --devices 1,2)
  PROCESSES=(--backends torch,jax,mxnet --epochs 2 --rounds 2)
fi
python -c "import multidev_torch, multidev_jax, multidev_mxnet" 2>/dev/null \
  || { stamp "multidev's engines are not in this Python: activate the tested set's virtual environment (README)"
       exit 1; }
python -c "import keras" 2>/dev/null \
  || { stamp "Keras is missing: pip install -c constraints.txt -e './backends/jax[keras]'"; exit 1; }
{ python -m bench.harness; git log --oneline -1; } 2>&1 | tee -a "$OUT/summary.md"

part jax python -m bench.bench_jax "${JAX[@]}"
part engines python -m bench.bench_engines "${ENGINES[@]}"
part processes python -m bench.bench_processes "${PROCESSES[@]}"
if [ "${QUICK:-0}" != 1 ]; then
  stamp "quick suite: python -m pytest -q (wall time and peak resident memory of the test process)"
  /usr/bin/time -f "quick suite: %e s wall, peak %M KiB resident" python -m pytest -q -p no:cacheprovider \
    2>&1 | tail -4 | tee "$OUT/suite.log"
fi
stamp "forms this CPU chose (multidev backends)"
multidev backends 2>&1 | grep -E "BatchNorm sums|threads: measured|device parts|convolution inputs|cpu layout" \
  | tee -a "$OUT/summary.md"
for name in jax engines processes; do
  [ -f "$OUT/$name.log" ] \
    && { echo; echo "### $name"; grep -E "^# |^results:" "$OUT/$name.log"; last_table "$OUT/$name.log"; }
done >> "$OUT/summary.md"
[ -f "$OUT/suite.log" ] \
  && { echo; echo "### suite"; grep -E "quick suite:|passed" "$OUT/suite.log"; } >> "$OUT/summary.md"
stamp "done: $OUT/summary.md"
