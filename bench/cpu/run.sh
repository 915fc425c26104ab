#!/usr/bin/env bash
# Compiles every stdlib method to a bundle and runs cac-bench-cpu on them;
# extra arguments go to cac-bench-cpu (e.g. --shapes 256x4096 --iters 3).
#   bench/cpu/run.sh [--methods gae,sae] [--shapes 256x4096,64x1024] ...
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=${CAC_BUILD_DIR:-build}
ninja -C "$BUILD" cac cac-bench-cpu > /dev/null
DIR=$(mktemp -d)
trap 'rm -rf "$DIR"' EXIT
for f in stdlib/*.cac; do
  n=$(basename "$f" .cac)
  "$BUILD/bin/cac" compile "$f" -o "$DIR/$n.ptx" --bundle "$DIR/$n"
done
echo "$(date -u +%Y-%m-%d), $(nproc) cores: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
"$BUILD/bin/cac-bench-cpu" --stdlib stdlib --bundles "$DIR" "$@"
