#!/bin/bash
# On the development machine: copies GoogleTest's sources and nlohmann-json's
# headers into .gpu-deps/ (git-ignored through .git/info/exclude) so that they
# can travel to a GPU machine that has neither.
set -euo pipefail
repo=$(git rev-parse --show-toplevel)
deps=$repo/.gpu-deps
grep -qx '/.gpu-deps/' "$repo/.git/info/exclude" 2>/dev/null ||
  echo '/.gpu-deps/' >>"$repo/.git/info/exclude"
rm -rf "$deps"
mkdir -p "$deps/include"
cp -r /usr/src/googletest "$deps/googletest"
cp -r /usr/include/nlohmann "$deps/include/"
# Bundles of the stdlib estimators, when a compiler build is at hand (the GPU
# machine has no MLIR to make them): StdlibBundle tests run them there.
cac=${CAC:-$repo/build/bin/cac}
if [ -x "$cac" ]; then
  for m in gae grpo; do  # grpo: also runtime/tools/cac-run/gpu-check/run.sh
    "$cac" compile --bundle "$deps/stdlib-bundles/$m" \
      -o "$deps/stdlib-bundles/$m.ptx" "$repo/stdlib/$m.cac"
  done
fi
echo "staged $(du -sh "$deps" | cut -f1) in $deps"
