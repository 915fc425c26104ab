#!/usr/bin/env bash
# Every GPU check in one device call, inside a time budget (a session is lent
# a GPU for minutes, not hours). On the GPU machine, from the repository root,
# carrying .gpu-deps (scripts/gpu/stage.sh makes it here):
#
#   BUDGET=540 scripts/gpu/session.sh [STEP ...]
#
# builds the two standalone projects at once (the runtime's kernel tests and
# GPU benchmark; cac-run and the generation benchmark), then runs the steps
# of scripts/gpu/check.sh in the order given (default: tests train main bench
# gen), each cut off at what is left of BUDGET seconds, and packs every log
# into $OUT/logs.tgz (the device tool returns only a few files) with the
# tables (bench-gpu.md, generation-cuda.md, baselines-cuda.md, genbf16.md) and summary.txt beside it. A step
# that did not start for lack of time says so in summary.txt. Exit status 0
# only if every step ran and passed. DEVICE=cpu NCCL=0, with a python3 on PATH
# that names a CPU LibTorch, checks the script on a machine without a GPU.
set -uo pipefail
cd "$(dirname "$0")/../.."
budget=${BUDGET:-540}
final=${OUT:-/tmp/cac-gpu-session}
mkdir -p "$final"
export OUT=/tmp/cac-gpu-session-logs
rm -rf "$OUT"
mkdir -p "$OUT"
steps=("$@")
[ ${#steps[@]} = 0 ] && steps=(tests train main bench gen)
summary=$final/summary.txt
: >"$summary"
note() { echo "$*" | tee -a "$summary"; }
pack() {
  for f in bench-gpu.md generation-cuda.md baselines-cuda.md main-metrics.jsonl genbf16.md genbf16.jsonl rlstep.md; do
    [ -f "$OUT/$f" ] && cp "$OUT/$f" "$final/"
  done
  tar czf "$final/logs.tgz" -C "$OUT" . 2>/dev/null
}
trap pack EXIT
left() { echo $((budget - SECONDS)); }

py=$(command -v python3)
torchlib=$(dirname "$($py -c "import torch; print(torch.__file__)")")/lib
export PATH=/usr/local/cuda/bin:$PATH
note "$(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader)"
note "torch $($py -c 'import torch; print(torch.__version__)'), $(nproc) cores, $(date -u +%FT%TZ)"

# Both builds at once (16 cores, and the second project is the larger), by
# the scripts the steps call, so that the steps find them built.
mkdir -p "$OUT/prebuild-train" "$OUT/prebuild-kernels"
pretrain=""
if [[ " ${steps[*]} " =~ \ (train|main|gen|genbf16|rlstep|gloo2|memory)\  ]]; then
  OUT=$OUT/prebuild-train BUILD_ONLY=1 scripts/gpu/cac-run/run.sh \
    >"$OUT/prebuild-train.log" 2>&1 &
  pretrain=$!
fi
OUT=$OUT/prebuild-kernels BUILD_ONLY=1 scripts/gpu/kernels/run.sh \
  >"$OUT/prebuild-kernels.log" 2>&1
kernels_built=$?
note "kernels build: rc $kernels_built at ${SECONDS}s"
[ $kernels_built = 0 ] || cat "$OUT/prebuild-kernels.log"
train_built=""

status=0
for s in "${steps[@]}"; do
  t=$(left)
  if [ "$t" -lt 30 ]; then
    note "$s: not run, ${t}s of the budget left"
    status=1
    continue
  fi
  case $s in
  train | main | gen | genbf16 | rlstep | gloo2 | memory)
    if [ -z "$train_built" ]; then
      wait $pretrain
      train_built=$?
      note "cac-run build: rc $train_built at ${SECONDS}s"
      cat "$OUT/prebuild-train.log"
      cp /tmp/cac-run-gpu/CMakeFiles/CMakeConfigureLog.yaml "$OUT/" 2>/dev/null
    fi
    [ "$train_built" = 0 ] || { note "$s: not run, cac-run did not build"; status=1; continue; }
    ;;
  *) [ "$kernels_built" = 0 ] || { note "$s: not run, the kernels did not build"; status=1; continue; } ;;
  esac
  t=$(left)
  echo "== $s (${t}s left)"
  export LD_LIBRARY_PATH=$torchlib:${LD_LIBRARY_PATH:-}
  case $s in
  gen)
    # The GPU only (the CPU rows are in docs/benchmarks.md); stops when cut off.
    timeout "$t" /tmp/cac-run-gpu/bin/cac-bench-generation --device "${DEVICE:-cuda}" \
      ${GEN_ARGS:---models tiny,small,medium --prompts 64 --samples 8 --new 24,128 --iters 3} |
      tee "$OUT/generation-cuda.md"
    rc=${PIPESTATUS[0]}
    ;;
  *)
    timeout "$t" scripts/gpu/check.sh "$s"
    rc=$?
    ;;
  esac
  note "$s: rc $rc at ${SECONDS}s$([ $rc = 124 ] && echo ' (cut off by the budget)')"
  [ $rc = 0 ] || status=1
done
exit $status
