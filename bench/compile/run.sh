#!/usr/bin/env bash
# Times `cac compile` on every stdlib method (docs/benchmarks.md): the wall
# and CPU time of the whole process, as a user sees it, median of ITERS runs
# after one warm-up run, for
#   front end   cac compile F --emit=mlir          parse, Sema, MLIRGen, verify
#   cpu ir      cac compile F --emit=llvm          + CPU pipeline, LLVM IR (-O3)
#   ptx         cac compile F -o F.ptx             + CUDA pipeline to PTX (sm_90)
#   ptx+bundle  cac compile F -o F.ptx --bundle D  + CPU pipeline, host.so
#                                                  (object code linked by cc)
# Prints a Markdown table. A benchmark, not a test.
#
#   bench/compile/run.sh [--iters N] [--methods gae,sae,...]
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=${CAC_BUILD_DIR:-build}
ITERS=5
METHODS=""
while [ $# -gt 0 ]; do
  case "$1" in
    --iters) ITERS=$2; shift 2;;
    --methods) METHODS=$2; shift 2;;
    *) echo "usage: $0 [--iters N] [--methods a,b]" >&2; exit 2;;
  esac
done
case "$ITERS" in ''|*[!0-9]*|0) echo "--iters must be a positive integer" >&2; exit 2;; esac
if [ -z "$METHODS" ]; then
  METHODS=$(for f in stdlib/*.cac; do basename "$f" .cac; done | paste -sd, -)
fi
ninja -C "$BUILD" cac > /dev/null
CAC="$BUILD/bin/cac"
DIR=$(mktemp -d)
trap 'rm -rf "$DIR"' EXIT

# "WALL/CPU": median wall time and median CPU time (user + sys) in seconds
# of ITERS runs of the command, after a warm-up run. On a shared machine the
# CPU time is the steadier of the two.
TIMEFORMAT='%R %U %S'
median() {
  "$@" > /dev/null
  local out="$DIR/times"
  : > "$out"
  for ((i = 0; i < ITERS; i++)); do
    { time "$@" > /dev/null; } 2>> "$out"
  done
  local wall cpu
  wall=$(awk '{ print $1 }' "$out" | sort -g | awk -v n="$ITERS" 'NR == int((n + 1) / 2)')
  cpu=$(awk '{ print $2 + $3 }' "$out" | sort -g | awk -v n="$ITERS" 'NR == int((n + 1) / 2)')
  printf '%.2f / %.2f' "$wall" "$cpu"
}

echo "$(date -u +%Y-%m-%d), $(nproc) cores: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)," \
  "load average $(cut -d' ' -f1-3 /proc/loadavg), median of $ITERS"
echo
echo "wall / cpu seconds; startup (\`cac --version\`, loading LLVM and MLIR; LibTorch is loaded only by \`cac eval --backend eager\`):" \
  "$(median "$CAC" --version)"
echo
echo "| method | lines | kernels | front end | cpu ir | ptx | ptx + bundle |"
echo "| --- | --- | --- | --- | --- | --- | --- |"
worst=0
for m in ${METHODS//,/ }; do
  f=stdlib/$m.cac
  [ -f "$f" ] || { echo "no $f" >&2; exit 2; }
  lines=$(grep -cvE '^[[:space:]]*(#|$)' "$f")
  fe=$(median "$CAC" compile "$f" --emit=mlir -o "$DIR/$m.mlir")
  ir=$(median "$CAC" compile "$f" --emit=llvm -o "$DIR/$m.ll")
  ptx=$(median "$CAC" compile "$f" -o "$DIR/$m.ptx")
  all=$(median "$CAC" compile "$f" -o "$DIR/$m.ptx" --bundle "$DIR/$m")
  kernels=$(python3 -c "import json, sys; print(len(json.load(open(sys.argv[1]))['kernels']))" "$DIR/$m/manifest.json")
  echo "| $m | $lines | $kernels | $fe | $ir | $ptx | $all |"
  worst=$(awk -v a="$worst" -v b="${all% / *}" 'BEGIN { print (b > a ? b : a) }')
done
echo
echo "slowest ptx + bundle: $worst s wall (target: under 1 s per method)"
