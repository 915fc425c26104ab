#!/usr/bin/env bash
# Installs what is needed, builds cac with its tests, and runs every test:
# CTest (lit suites over the compiler, GoogleTest over the runtime) and the
# comparison of `cac eval` against the independent Python reference on
# random batches; then fuzzes the front end and every reader for a bounded
# time.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh
BUILD=${CAC_BUILD_DIR:-build}
status=0
(cd "$BUILD" && ctest --output-on-failure -j"$(nproc)") || status=1
# The Python reference's own worked vectors and gradient checks.
python3 test/reference/vectors_test.py || status=1
# Every stdlib estimator against the independent Python reference, both
# backends; every stdlib objective's compiled gradient against LibTorch
# autograd and the reference, in every aggregation mode.
methods=$(for f in $(grep -l '^estimator ' stdlib/*.cac); do basename "$f" .cac; done | paste -sd, -)
for backend in cpu eager; do
  python3 test/reference/check_eval.py --cac "$BUILD/bin/cac" --method "$methods" \
    --backend "$backend" --seeds 1-6 --max-len 4096 --stdlib stdlib || status=1
done
# Short sequences (1 to 9 tokens): the CPU's token loops take the first token
# alone, then four at a time where a scan discounts, then what is left.
python3 test/reference/check_eval.py --cac "$BUILD/bin/cac" --method "$methods" \
  --backend cpu --seeds 1-6 --max-len 9 --num-seqs 24 --stdlib stdlib || status=1
# The GPU's block-per-sequence kernels, their threads simulated on the CPU
# (`--backend gpu-sim`), against the same reference: the GPU's default blocks
# (128 threads x 4 tokens, four warps, --seq-layout auto), blocks of 64
# threads (two warps, so the block scan's cross-warp step runs) with 2 tokens
# per thread, blocks of 4 threads with 3 tokens (many tiles, positions past
# the end), and blocks of 64 x 2 and 256 x 4 striped throughout (a block scan
# per row of a tile; the old 256 x 4 default's eight warps).
python3 test/reference/check_eval.py --cac "$BUILD/bin/cac" --method "$methods" \
  --backend gpu-sim --seeds 1-6 --max-len 4096 --stdlib stdlib || status=1
# The same in f32, the precision the bundles run in (host.so and the GPU's
# default 128 x 4 blocks), on sequences up to 8192 tokens: errors up to 9e-6
# relative were measured, the tolerance is 5e-5. vapo_gae up to 2048 tokens:
# beyond, its f32 advantages differ from the reference by up to 1e-4
# (docs/stdlib.md, "vapo_gae in float32").
f32_methods=$(echo "$methods" | tr , '\n' | grep -vx vapo_gae | paste -sd, -)
python3 test/reference/check_eval.py --cac "$BUILD/bin/cac" --method "$f32_methods" \
  --backend cpu,gpu-sim --seeds 1-6 --max-len 8192 --stdlib stdlib \
  --cac-arg=--dtype=f32 --tol 5e-5 || status=1
python3 test/reference/check_eval.py --cac "$BUILD/bin/cac" --method vapo_gae \
  --backend cpu,gpu-sim --seeds 1-6 --max-len 2048 --stdlib stdlib \
  --cac-arg=--dtype=f32 --tol 5e-5 || status=1
python3 test/reference/check_eval.py --cac "$BUILD/bin/cac" --method "$methods" \
  --backend gpu-sim --seeds 1-6 --max-len 4096 --stdlib stdlib \
  --cac-arg=--seq-block=64 --cac-arg=--seq-items=2 || status=1
python3 test/reference/check_eval.py --cac "$BUILD/bin/cac" --method "$methods" \
  --backend gpu-sim --seeds 7-9 --max-len 1024 --stdlib stdlib \
  --cac-arg=--seq-block=4 --cac-arg=--seq-items=3 || status=1
python3 test/reference/check_eval.py --cac "$BUILD/bin/cac" --method "$methods" \
  --backend gpu-sim --seeds 10-12 --max-len 2048 --stdlib stdlib \
  --cac-arg=--seq-block=64 --cac-arg=--seq-items=2 --cac-arg=--seq-layout=striped || status=1
python3 test/reference/check_eval.py --cac "$BUILD/bin/cac" --method "$methods" \
  --backend gpu-sim --seeds 13-14 --max-len 4096 --stdlib stdlib \
  --cac-arg=--seq-block=256 --cac-arg=--seq-layout=striped || status=1
# Group kernels of their own (--fuse-groups=false; fused into the seq kernels
# that read them by default: GRPO, RLOO, TreeAdv), on the CPU and in the GPU's
# blocks.
python3 test/reference/check_eval.py --cac "$BUILD/bin/cac" --method "$methods" \
  --backend cpu,gpu-sim --seeds 15-17 --max-len 2048 --stdlib stdlib \
  --cac-arg=--fuse-groups=false || status=1
# The edges the conventions settle (cacref.edge_batch): no epsilon on groups
# of equal rewards (inexact ones such as 0.1 too), trees of equal rewards,
# chains up to 4096 one-token nodes deep; every backend, f64 and f32.
edge_methods=grpo,treeadv,spo_tree,grpo_passk,otb
python3 test/reference/check_eval.py --cac "$BUILD/bin/cac" --method "$edge_methods" \
  --backend cpu,eager,gpu-sim --seeds 1-6 --max-len 4096 --stdlib stdlib \
  --params edge || status=1
python3 test/reference/check_eval.py --cac "$BUILD/bin/cac" --method "$edge_methods" \
  --backend cpu,eager,gpu-sim --seeds 7-12 --max-len 4096 --stdlib stdlib \
  --params edge --cac-arg=--dtype=f32 --tol 5e-5 || status=1
# The built-ins that read across a group (group_rank, group_second_max,
# group_pos_*: test/reference/lang/group_ops.cac) on every backend, random and
# edge batches, f64 and f32.
python3 test/reference/check_eval.py --cac "$BUILD/bin/cac" --method group_ops \
  --backend cpu,eager,gpu-sim --seeds 1-6 --max-len 4096 --stdlib test/reference/lang || status=1
python3 test/reference/check_eval.py --cac "$BUILD/bin/cac" --method group_ops \
  --backend cpu,eager,gpu-sim --seeds 1-6 --max-len 4096 --stdlib test/reference/lang \
  --params edge --cac-arg=--dtype=f32 --tol 5e-5 || status=1
# batch_top_k and uniform (test/reference/lang/batch_ops.cac): ties, k = 0 and
# beyond the token count, a runtime count, a seeded random subset; f64 and f32.
python3 test/reference/check_eval.py --cac "$BUILD/bin/cac" --method batch_ops \
  --backend cpu,eager,gpu-sim --seeds 1-8 --max-len 4096 --stdlib test/reference/lang || status=1
python3 test/reference/check_eval.py --cac "$BUILD/bin/cac" --method batch_ops \
  --backend cpu,eager,gpu-sim --seeds 9-14 --max-len 4096 --stdlib test/reference/lang \
  --cac-arg=--dtype=f32 --tol 5e-5 || status=1
# (check_objective runs the objectives' gpu-sim kernels too: blocks of 8
# threads x 2 tokens, then 256 x 4.)
python3 test/reference/check_objective.py --cac "$BUILD/bin/cac" --seeds 1-3 \
  --max-len 512 || status=1
python3 test/reference/check_objective.py --cac "$BUILD/bin/cac" --seeds 4-5 \
  --max-len 2048 --sim-block 256 --sim-items 4 || status=1
# Observation tokens (tool output): estimators and objectives see the actions
# only (gpu-sim: blocks of 32 threads, then the default 256).
for backend in cpu eager gpu-sim; do
  python3 test/reference/check_obs.py --cac "$BUILD/bin/cac" --backend "$backend" \
    --seeds 1-3 --cac-arg=--seq-block=32 || status=1
done
python3 test/reference/check_obs.py --cac "$BUILD/bin/cac" --backend gpu-sim \
  --seeds 4-6 || status=1
# What a GPU session runs (scripts/gpu/check.sh), dry-run here against
# Debian's LibTorch so that it keeps working between GPU sessions: the
# staging of bundles and sources, the runtime kernels' standalone build and
# its tests (the CUDA ones skip), and cac-run's standalone build with its
# training check on the CPU (ten methods' first RL step resumed from an SFT
# checkpoint twice, the same metrics; an SFT + RL run and --resume).
scripts/gpu/stage.sh || status=1
gpu_out=$(mktemp -d)
TORCH_PREFIX= TORCH_LIB= OUT=$gpu_out BUILD=$BUILD/gpu-dry-kernels \
  scripts/gpu/kernels/run.sh || status=1
TORCH_PREFIX= TORCH_LIB= DEVICE=cpu NCCL=0 OUT=$gpu_out BUILD=$BUILD/gpu-dry-cac-run \
  scripts/gpu/cac-run/run.sh || status=1
rm -rf "$gpu_out"
# The fuzz targets (test/fuzz/README.md): a clang build in build-fuzz/ (ASan
# + UBSan), then CAC_FUZZ_SECONDS (150) of fuzzing the front end and a fixed
# number of inputs of each reader (run.sh --ci: about 30 s for all of them),
# each from its seed corpus; a crash, sanitizer report or hang fails.
# CAC_FUZZ_SECONDS=0 skips it (for local runs; CI runs it).
fuzz_seconds=${CAC_FUZZ_SECONDS:-150}
if [ "$fuzz_seconds" != 0 ]; then
  CAC_FUZZ_SECONDS=$fuzz_seconds test/fuzz/run.sh --ci || status=1
fi
exit $status
