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
echo "staged $(du -sh "$deps" | cut -f1) in $deps"
