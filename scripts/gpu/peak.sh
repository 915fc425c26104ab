# Sourced by the GPU scripts that report a program's peak device memory
# (scripts/gpu/cac-run/run.sh genbf16, bench/train/rlstep.sh).
#
# peak_mib DEVICE SCRATCH LOG CMD...: runs CMD (its output to LOG) while
# polling the GPU's memory in use every 100 ms into the file SCRATCH; prints
# the peak above the memory in use before it started, in MiB (null on the
# CPU or without nvidia-smi); returns CMD's exit status.
peak_mib() {
  local device=$1 mem=$2 log=$3 poll="" base=0 rc top
  shift 3
  if [ "$device" != cpu ] && command -v nvidia-smi >/dev/null; then
    base=$(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits | head -1)
    nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 100 \
      >"$mem" 2>/dev/null &
    poll=$!
  fi
  "$@" >"$log" 2>&1
  rc=$?
  if [ -n "$poll" ]; then
    kill "$poll" 2>/dev/null
    wait "$poll" 2>/dev/null
    top=$(sort -n "$mem" | tail -1)
    [ -n "$top" ] && [ -n "$base" ] && echo $((top - base)) || echo null
  else
    echo null
  fi
  return $rc
}
