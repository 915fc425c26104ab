#!/usr/bin/env bash
# The main job: installs what is needed, builds cac, and runs the embedded
# default. Until the training runtime lands, the default compiles every
# estimator of stdlib/ to PTX (checked with ptxas when CUDA is present) and
# evaluates each one on its example batch with the compiled CPU backend and
# the eager LibTorch backend.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
CAC_ENABLE_TESTS=OFF scripts/build.sh
BUILD=${CAC_BUILD_DIR:-build}
OUT=${CAC_OUT:-out}
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
echo "outputs in $OUT/"
