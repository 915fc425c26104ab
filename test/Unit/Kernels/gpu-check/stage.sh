#!/bin/bash
# On the development machine: copies GoogleTest's sources and nlohmann-json's
# headers into .gpu-deps/ (git-ignored through .gitignore) so that they can
# travel to a GPU machine that has neither.
set -euo pipefail
repo=$(cd "$(dirname "$0")/../../../.." && pwd)
deps=$repo/.gpu-deps
rm -rf "$deps"
mkdir -p "$deps/include"
cp -r /usr/src/googletest "$deps/googletest"
cp -r /usr/include/nlohmann "$deps/include/"
# Bundles of the stdlib, when a compiler build is at hand (the GPU machine has
# no MLIR to make them): the StdlibBundle tests run every one of them there
# (EveryMethodCudaMatchesCpu: GPU against host.so), grpo's also trains in
# runtime/tools/cac-run/gpu-check/run.sh. bench-bundles/ holds what
# `run.sh --bench` measures: the methods with seq kernels, each also in the
# one-thread-per-sequence form (NAME-thread, --seq-block 0), and GAE and SAE
# with other block shapes (NAME-b128, -b512: threads; NAME-i2, -i8: tokens per
# thread; NAME-b128i2 both), all measured in one run.
cac=${CAC:-$repo/build/bin/cac}
if [ -x "$cac" ]; then
  for f in "$repo"/stdlib/*.cac; do
    m=$(basename "$f" .cac)
    "$cac" compile --bundle "$deps/stdlib-bundles/$m" -o /dev/null "$f"
  done
  bench() { # NAME VARIANT FLAGS...
    local m=$1 v=$2
    shift 2
    "$cac" compile "$@" --bundle "$deps/bench-bundles/$m${v:+-$v}" \
      -o /dev/null "$repo/stdlib/$m.cac"
  }
  for m in gae sae grpo gae_dense rloo spo_chain sapo spo_tree treeadv; do
    bench $m ""
    bench $m thread --seq-block 0
  done
  # Block shapes to choose the defaults from (GAE and SAE: the scans).
  for m in gae sae; do
    bench $m b128 --seq-block 128
    bench $m b512 --seq-block 512
    bench $m i2 --seq-items 2
    bench $m i8 --seq-items 8
    # On the H200 (2026-11-26) 128 threads beat the default at 16.8M tokens
    # and 2 tokens a thread at 256 sequences: the two together.
    bench $m b128i2 --seq-block 128 --seq-items 2
  done
fi
echo "staged $(du -sh "$deps" | cut -f1) in $deps"
