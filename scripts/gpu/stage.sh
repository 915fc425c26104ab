#!/bin/bash
# On the development machine: copies GoogleTest's sources, nlohmann-json's
# headers and Gloo's headers (Debian's libgloo-dev: pip's LibTorch holds
# Gloo but ships only c10d's ProcessGroupGloo.hpp, which includes them) into
# .gpu-deps/ (git-ignored through .gitignore) so that they can travel to a
# GPU machine that has none of them.
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
deps=$repo/.gpu-deps
rm -rf "$deps"
mkdir -p "$deps/include"
cp -r /usr/src/googletest "$deps/googletest"
cp -r /usr/include/nlohmann "$deps/include/"
cp -r /usr/include/gloo "$deps/include/"
# The Qwen3 tokenizer for the rlstep step (scripts/setup.sh installs it).
if [ -d "$repo/.deps/tokenizers/qwen3" ]; then
  mkdir -p "$deps/tokenizers"
  cp -r "$repo/.deps/tokenizers/qwen3" "$deps/tokenizers/"
fi
# Bundles of the stdlib, when a compiler build is at hand (the GPU machine has
# no MLIR to make them): the StdlibBundle tests run every one of them there
# (EveryMethodCudaMatchesCpu: GPU against host.so), grpo's also trains in
# scripts/gpu/cac-run/run.sh. bench-bundles/ holds what
# `run.sh --bench` measures, all in one run: the methods with seq kernels as
# `cac compile` makes them (blocks of 128 threads x 4 tokens, --seq-layout
# auto, the next tile prefetched into L2), each also in the
# one-thread-per-sequence form (NAME-thread, --seq-block 0), with blocks of
# 256 (NAME-b256) and without the prefetch (NAME-nopf); GAE, SAE, GRPO and
# RLOO also with 256 threads, blocked and without the prefetch
# (NAME-blocked256), striped throughout (NAME-striped) and with other
# shapes (NAME-b64: 64 threads; NAME-i2, -i8: tokens per thread); GRPO, RLOO
# and TreeAdv with their group kernel apart from the seq kernel (NAME-nofg);
# SPO-chain and SAPO prefetching only the buffers they did not write
# (NAME-pfin); GAE, SAE, GAE-dense, GRPO and RLOO with each sequence split
# over several blocks when the batch has fewer than 1024 or 2048 sequences
# (NAME-split: --seq-split 1024, NAME-split2k: --seq-split 2048). (The
# register bounds of --seq-min-blocks are not staged: they
# do not pay at 128 threads, docs/benchmarks.md.)
cac=${CAC:-$repo/build/bin/cac}
if [ -x "$cac" ]; then
  for f in "$repo"/stdlib/*.cac; do
    m=$(basename "$f" .cac)
    "$cac" compile --bundle "$deps/stdlib-bundles/$m" -o /dev/null "$f"
  done
  # The Python package's verl methods (bench/python/baselines.py times
  # them on the GPU against verl's own forms).
  for f in "$repo"/python/cac/methods/*.cac; do
    "$cac" compile --bundle "$deps/python-bundles/$(basename "$f" .cac)" -o /dev/null "$f"
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
    bench $m b256 --seq-block 256
    bench $m nopf --seq-prefetch=false
  done
  for m in gae sae grpo rloo; do
    bench $m blocked256 --seq-block 256 --seq-layout blocked --seq-prefetch=false
    bench $m striped --seq-layout striped
    bench $m b64 --seq-block 64
    bench $m i2 --seq-items 2
    bench $m i8 --seq-items 8
  done
  # The group statistics in a group kernel of their own (--fuse-groups=false:
  # GRPO and RLOO two kernels instead of one, TreeAdv five instead of four,
  # its tree-building kernel among them).
  for m in grpo rloo treeadv; do
    bench $m nofg --fuse-groups=false
  done
  # The prefetch of only what the kernel did not write itself (SPO-chain
  # lost 11-24% to the prefetch at 1024-2048 sequences; 7 of its prefetches
  # become 3, SAPO's 9 become 2).
  for m in spo_chain sapo; do
    bench $m pfin --seq-prefetch-written=false
  done
  # Few long sequences split over several blocks each, a scan's parts
  # starting from a carries kernel's compositions (docs/pipeline.md,
  # "Splitting long sequences"); at 4096 sequences and more nothing splits.
  for m in gae sae gae_dense grpo rloo; do
    bench $m split --seq-split 1024
    bench $m split2k --seq-split 2048
  done
fi
echo "staged $(du -sh "$deps" | cut -f1) in $deps"
