#!/usr/bin/env bash
# Installs what is needed, builds cac with its tests, and runs every test:
# CTest (lit suites over the compiler, GoogleTest over the runtime) and the
# comparison of `cac eval` against the independent Python reference on
# random batches; then fuzzes the front end and every reader for a bounded
# time.
set -euo pipefail
cd "$(dirname "$0")/.."
status=0
# phase NAME CMD...: runs CMD, a failure fails the whole run (at the end), and
# its wall time is added to NAME's line of the table printed last.
phase_names=()
declare -A phase_secs
phase() {
  local name=$1 t0=$SECONDS
  shift
  "$@" || status=1
  [ -n "${phase_secs[$name]+x}" ] || phase_names+=("$name")
  phase_secs[$name]=$(( ${phase_secs[$name]:-0} + SECONDS - t0 ))
}
print_phases() {
  echo "scripts/test.sh: wall time per phase (s)"
  local n
  for n in "${phase_names[@]}"; do printf '  %-28s %5d\n' "$n" "${phase_secs[$n]}"; done
  printf '  %-28s %5d\n' total "$SECONDS"
  [ $status = 0 ] && echo "scripts/test.sh: all passed" || echo "scripts/test.sh: FAILED (see above)"
}
trap print_phases EXIT
phase setup scripts/setup.sh
phase build scripts/build.sh
[ $status = 0 ] || exit 1
BUILD=${CAC_BUILD_DIR:-build}
run_ctest() { (cd "$BUILD" && ctest --output-on-failure -j"$(nproc)"); }
phase ctest run_ctest
# The Python reference's own worked vectors and gradient checks.
phase "reference vectors" python3 test/reference/vectors_test.py
# Every stdlib estimator against the independent Python reference on the
# three backends (check_eval.py draws each batch and computes its reference
# once, then runs every backend named on it): the compiled CPU code, the eager
# LibTorch interpreter, and the GPU's block-per-sequence kernels with their
# threads simulated on the CPU (`--backend gpu-sim`) in the GPU's default
# blocks (128 threads x 4 tokens, four warps, --seq-layout auto).
methods=$(for f in $(grep -l '^estimator ' stdlib/*.cac); do basename "$f" .cac; done | paste -sd, -)
phase "check_eval f64" python3 test/reference/check_eval.py --cac "$BUILD/bin/cac" --method "$methods" \
  --backend cpu,eager,gpu-sim --seeds 1-6 --max-len 4096 --stdlib stdlib
# Short sequences (1 to 9 tokens): the CPU's token loops take the first token
# alone, then four at a time where a scan discounts, then what is left.
phase "check_eval f64" python3 test/reference/check_eval.py --cac "$BUILD/bin/cac" --method "$methods" \
  --backend cpu --seeds 1-6 --max-len 9 --num-seqs 24 --stdlib stdlib
# The same in f32, the precision the bundles run in (host.so and the GPU's
# default 128 x 4 blocks), on sequences up to 8192 tokens: errors up to 9e-6
# relative were measured, the tolerance is 5e-5. vapo_gae up to 2048 tokens:
# beyond, its f32 advantages differ from the reference by up to 1e-4
# (docs/stdlib.md, "vapo_gae in float32").
f32_methods=$(echo "$methods" | tr , '\n' | grep -vx vapo_gae | paste -sd, -)
phase "check_eval f32" python3 test/reference/check_eval.py --cac "$BUILD/bin/cac" --method "$f32_methods" \
  --backend cpu,gpu-sim --seeds 1-6 --max-len 8192 --stdlib stdlib \
  --cac-arg=--dtype=f32 --tol 5e-5
phase "check_eval f32" python3 test/reference/check_eval.py --cac "$BUILD/bin/cac" --method vapo_gae \
  --backend cpu,gpu-sim --seeds 1-6 --max-len 2048 --stdlib stdlib \
  --cac-arg=--dtype=f32 --tol 5e-5
# The GPU's kernels in other block shapes (gpu-sim): blocks of 64 threads (two
# warps, so the block scan's cross-warp step runs) with 2 tokens per thread,
# blocks of 4 threads with 3 tokens (many tiles, positions past the end), and
# blocks of 64 x 2 and 256 x 4 striped throughout (a block scan per row of a
# tile; the old 256 x 4 default's eight warps).
phase "check_eval gpu-sim" python3 test/reference/check_eval.py --cac "$BUILD/bin/cac" --method "$methods" \
  --backend gpu-sim --seeds 1-6 --max-len 4096 --stdlib stdlib \
  --cac-arg=--seq-block=64 --cac-arg=--seq-items=2
phase "check_eval gpu-sim" python3 test/reference/check_eval.py --cac "$BUILD/bin/cac" --method "$methods" \
  --backend gpu-sim --seeds 7-9 --max-len 1024 --stdlib stdlib \
  --cac-arg=--seq-block=4 --cac-arg=--seq-items=3
phase "check_eval gpu-sim" python3 test/reference/check_eval.py --cac "$BUILD/bin/cac" --method "$methods" \
  --backend gpu-sim --seeds 10-12 --max-len 2048 --stdlib stdlib \
  --cac-arg=--seq-block=64 --cac-arg=--seq-items=2 --cac-arg=--seq-layout=striped
phase "check_eval gpu-sim" python3 test/reference/check_eval.py --cac "$BUILD/bin/cac" --method "$methods" \
  --backend gpu-sim --seeds 13-14 --max-len 4096 --stdlib stdlib \
  --cac-arg=--seq-block=256 --cac-arg=--seq-layout=striped
# Group kernels of their own (--fuse-groups=false; fused into the seq kernels
# that read them by default: GRPO, RLOO, TreeAdv), on the CPU and in the GPU's
# blocks.
phase "check_eval group kernels" python3 test/reference/check_eval.py --cac "$BUILD/bin/cac" --method "$methods" \
  --backend cpu,gpu-sim --seeds 15-17 --max-len 2048 --stdlib stdlib \
  --cac-arg=--fuse-groups=false
# The edges the conventions settle (cacref.edge_batch): no epsilon on groups
# of equal rewards (inexact ones such as 0.1 too), trees of equal rewards,
# chains up to 4096 one-token nodes deep; every backend, f64 and f32.
edge_methods=grpo,treeadv,spo_tree,grpo_passk,otb,gigpo
phase "check_eval edges, language ops" python3 test/reference/check_eval.py --cac "$BUILD/bin/cac" --method "$edge_methods" \
  --backend cpu,eager,gpu-sim --seeds 1-6 --max-len 4096 --stdlib stdlib \
  --params edge
phase "check_eval edges, language ops" python3 test/reference/check_eval.py --cac "$BUILD/bin/cac" --method "$edge_methods" \
  --backend cpu,eager,gpu-sim --seeds 7-12 --max-len 4096 --stdlib stdlib \
  --params edge --cac-arg=--dtype=f32 --tol 5e-5
# The built-ins that read across a group (group_rank, group_second_max,
# group_pos_*, group_key_*: test/reference/lang/group_ops.cac, group_keys.cac)
# on every backend, random and edge batches, f64 and f32.
phase "check_eval edges, language ops" python3 test/reference/check_eval.py --cac "$BUILD/bin/cac" --method group_ops,group_keys \
  --backend cpu,eager,gpu-sim --seeds 1-6 --max-len 4096 --stdlib test/reference/lang
phase "check_eval edges, language ops" python3 test/reference/check_eval.py --cac "$BUILD/bin/cac" --method group_ops,group_keys \
  --backend cpu,eager,gpu-sim --seeds 1-6 --max-len 4096 --stdlib test/reference/lang \
  --params edge --cac-arg=--dtype=f32 --tol 5e-5
# batch_top_k and uniform (test/reference/lang/batch_ops.cac): ties, k = 0 and
# beyond the token count, a runtime count, a seeded random subset; f64 and f32.
phase "check_eval edges, language ops" python3 test/reference/check_eval.py --cac "$BUILD/bin/cac" --method batch_ops \
  --backend cpu,eager,gpu-sim --seeds 1-8 --max-len 4096 --stdlib test/reference/lang
phase "check_eval edges, language ops" python3 test/reference/check_eval.py --cac "$BUILD/bin/cac" --method batch_ops \
  --backend cpu,eager,gpu-sim --seeds 9-14 --max-len 4096 --stdlib test/reference/lang \
  --cac-arg=--dtype=f32 --tol 5e-5
# (check_objective runs the objectives' gpu-sim kernels too: blocks of 8
# threads x 2 tokens, then 256 x 4.)
phase "check_objective" python3 test/reference/check_objective.py --cac "$BUILD/bin/cac" --seeds 1-3 \
  --max-len 512
phase "check_objective" python3 test/reference/check_objective.py --cac "$BUILD/bin/cac" --seeds 4-5 \
  --max-len 2048 --sim-block 256 --sim-items 4
# Observation tokens (tool output): estimators and objectives see the actions
# only (gpu-sim: blocks of 32 threads, then the default 256).
phase "check_obs" python3 test/reference/check_obs.py --cac "$BUILD/bin/cac" --backend cpu,eager,gpu-sim \
  --seeds 1-3 --cac-arg=--seq-block=32
phase "check_obs" python3 test/reference/check_obs.py --cac "$BUILD/bin/cac" --backend gpu-sim \
  --seeds 4-6
# What a GPU session runs (scripts/gpu/check.sh), dry-run here against
# Debian's LibTorch so that it keeps working between GPU sessions: the
# staging of bundles and sources; the standalone builds of the runtime
# kernels and of cac-run configured, with every source present (the main
# build compiles and tests the same sources); and the training check on the
# CPU with the main build's cac-run (ten methods' first RL step resumed from
# an SFT checkpoint twice, the same metrics; an SFT + RL run and --resume),
# its gloo2 mode with two CPU ranks (one rank's metrics, and --resume), the
# memory checks' refusals and a run that fits, and the rlstep benchmark's
# script at one layer and one step.
phase "gpu scripts, dry run" scripts/gpu/stage.sh
gpu_out=$(mktemp -d)
TORCH_PREFIX= TORCH_LIB= OUT=$gpu_out BUILD=$BUILD/gpu-dry-kernels CONFIGURE_ONLY=1 \
  phase "gpu scripts, dry run" scripts/gpu/kernels/run.sh
TORCH_PREFIX= TORCH_LIB= OUT=$gpu_out BUILD=$BUILD/gpu-dry-cac-run CONFIGURE_ONLY=1 \
  phase "gpu scripts, dry run" scripts/gpu/cac-run/run.sh
CAC_RUN=$BUILD/bin/cac-run DEVICE=cpu NCCL=0 OUT=$gpu_out \
  phase "gpu scripts, dry run" scripts/gpu/cac-run/run.sh
CAC_RUN=$BUILD/bin/cac-run DEVICE=cpu OUT=$gpu_out \
  phase "gpu scripts, dry run" scripts/gpu/cac-run/run.sh gloo2
CAC_RUN=$BUILD/bin/cac-run DEVICE=cpu OUT=$gpu_out \
  phase "gpu scripts, dry run" scripts/gpu/cac-run/run.sh memory
CAC_RUN=$BUILD/bin/cac-run DEVICE=cpu OUT=$gpu_out RLSTEP_LAYERS=1 RLSTEP_PROMPTS=1 \
  RLSTEP_SAMPLES=2 RLSTEP_NEW=4 RLSTEP_MINIBATCHES=1 RLSTEP_STEPS=1 RLSTEP_TOKENIZER=.deps/tokenizers/qwen3 \
  phase "gpu scripts, dry run" scripts/gpu/cac-run/run.sh rlstep
rm -rf "$gpu_out"
# The fuzz targets (test/fuzz/README.md): a clang build in build-fuzz/ (ASan
# + UBSan), then CAC_FUZZ_SECONDS (60) of fuzzing the front end and a fixed
# number of inputs of each reader (run.sh --ci: about 30 s for all of them),
# each from its seed corpus; a crash, sanitizer report or hang fails.
# CAC_FUZZ_SECONDS=0 skips it (for local runs; CI runs it).
fuzz_seconds=${CAC_FUZZ_SECONDS:-60}
if [ "$fuzz_seconds" != 0 ]; then
  CAC_FUZZ_SECONDS=$fuzz_seconds phase fuzz test/fuzz/run.sh --ci
fi
exit $status
