#!/usr/bin/env bash
# The main job: installs what is needed, builds cac, and runs the embedded
# default: cac-run examples/arith/train.cac (a tiny character-level
# transformer, a short SFT warm start, then GRPO on two-digit addition and
# subtraction, on the CPU; docs/training.md). A quick first step compiles
# every estimator of stdlib/ to PTX (checked with ptxas when CUDA is present)
# and evaluates each one on its example batch with the compiled CPU backend
# and the eager LibTorch backend.
#
#   CAC_OUT=DIR       where the stdlib outputs go (default out/)
#   CAC_RUN_OUT=DIR   the training run's output folder (default runs/arith)
#   CAC_SKIP_STDLIB=1 skip the first step
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
CAC_ENABLE_TESTS=OFF scripts/build.sh
BUILD=${CAC_BUILD_DIR:-build}
OUT=${CAC_OUT:-out}
RUN_OUT=${CAC_RUN_OUT:-runs/arith}

if [ "${CAC_SKIP_STDLIB:-0}" != 1 ]; then
  echo "== 1. stdlib estimators: PTX, bundles, CPU vs eager"
  mkdir -p "$OUT"
  PTXAS=$(command -v ptxas || echo /usr/local/cuda/bin/ptxas)
  for f in stdlib/*.cac; do
    name=$(basename "$f" .cac)
    echo "== $name"
    "$BUILD/bin/cac" compile "$f" -o "$OUT/$name.ptx" --bundle "$OUT/$name.cacb"
    if [ -x "$PTXAS" ]; then
      "$PTXAS" -arch=sm_90 "$OUT/$name.ptx" -o "$OUT/$name.cubin"
      echo "   PTX: $OUT/$name.ptx ($(grep -c '^.visible .entry' "$OUT/$name.ptx") kernels, accepted by ptxas -arch=sm_90)"
    else
      echo "   PTX: $OUT/$name.ptx (ptxas not found: not checked)"
    fi
    for batch in examples/batches/$name-*.json; do
      [ -f "$batch" ] || continue
      "$BUILD/bin/cac" eval "$f" --input "$batch" --backend cpu > "$OUT/$(basename "$batch" .json).cpu.json"
      "$BUILD/bin/cac" eval "$f" --input "$batch" --backend eager > "$OUT/$(basename "$batch" .json).eager.json"
      python3 scripts/compare_json.py "$OUT/$(basename "$batch" .json).cpu.json" \
        "$OUT/$(basename "$batch" .json).eager.json" --label "   $batch: cpu vs eager"
    done
  done
  echo "stdlib outputs in $OUT/"
fi

# 2. The training run of the embedded default (cac-run finds `cac` beside it
# in $BUILD/bin to compile the estimator). A previous run's folder is moved
# aside: cac-run refuses to start over an existing checkpoint.
echo "== 2. cac-run examples/arith/train.cac --out $RUN_OUT"
if [ -e "$RUN_OUT" ]; then
  mv "$RUN_OUT" "$RUN_OUT.old.$(date +%Y%m%d-%H%M%S)"
fi
"$BUILD/bin/cac-run" examples/arith/train.cac --out "$RUN_OUT"
echo "metrics: $RUN_OUT/metrics.jsonl (and metrics.csv)"
echo "plot:    $RUN_OUT/plot.png"
echo "model:   $RUN_OUT/final/"
