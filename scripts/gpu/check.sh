#!/usr/bin/env bash
# Everything that needs a GPU, for a session that is lent a GPU machine
# (CUDA, CMake, Ninja and a CUDA PyTorch there; no MLIR, no network).
#
# Here, on the development machine (it has the compiler):
#   scripts/gpu/stage.sh     # stdlib bundles, bench bundles,
#                                            # GoogleTest and nlohmann-json
#                                            # into .gpu-deps/ (git-ignored)
# Then on the GPU machine, from the repository root, carrying .gpu-deps:
#   scripts/gpu/check.sh [tests] [bench] [train] [python]  (all four by default)
#     tests  the runtime's kernel tests, CUDA ones included: every stdlib
#            bundle's PTX against its host.so (StdlibBundle.
#            EveryMethodCudaMatchesCpu), raw launches, mixed devices
#     bench  bench/gpu/cac-bench-gpu on the staged bench bundles (block vs
#            thread-per-sequence kernels and block shapes vs verl's loops,
#            against the device's copy bandwidth): docs/benchmarks.md
#     train  cac-run built against that LibTorch: ten tiny files' first RL
#            step on the CPU and on the GPU (same metrics), an SFT + RL run
#            and --resume on the GPU, and `--gpus 1` (c10d ProcessGroupNCCL)
#            against it (scripts/gpu/cac-run/run.sh; `nccl` is
#            another name for this step)
#     gloo2  cac-run built as for train: two ranks sharing the GPU over Gloo
#            on CUDA tensors (`--workers 2 --device cuda`, the code path of
#            `--gpus N` but for the process group) against one rank, and
#            its --resume; prints PASS or FAIL (not run by default)
#     memory the memory checks with cac-run on the GPU: a model whose
#            update's activations cannot fit and a batch whose rollouts
#            cannot fit are refused with their messages, a small run trains,
#            and two RL steps whose rollouts take half the device run, the
#            second counting LibTorch's cached blocks as free
#            (scripts/gpu/cac-run/run.sh memory; not run by default)
#     python the Python package's extension built against that torch, CUDA
#            tensors against CPU tensors through the staged bundles, a side
#            stream, no host sync on the packed path
#            (scripts/gpu/python/run.sh)
#     baselines  the python step, then bench/python/baselines.py: the
#            package against verl's loops, its vectorized GRPO/RLOO and a
#            torch.compile'd GAE step on the GPU (not run by default)
#     main   the embedded default (examples/arith/train.cac) trained on the
#            GPU: accuracy before and after RL, time per phase (not run by
#            default)
#     gen    generation tokens/s with and without the KV cache, on the GPU
#            and on the CPU (bench/generation; not run by default)
#     genbf16  bf16 generation at the Qwen2.5-0.5B and 1.5B shapes (random
#            weights; 64 prompts x 8 rollouts, 512 new tokens) against a
#            plain PyTorch generate loop with SDPA and a static KV cache
#            (bench/python/generate_baseline.py), tokens/s and peak device
#            memory in one table (scripts/gpu/cac-run/run.sh genbf16; not
#            run by default)
#     rlstep  the RL step at the Qwen2.5-0.5B shape: GRPO with random
#            weights, the Qwen3 tokenizer, bf16 rollouts, 64 prompts x 8
#            rollouts of 512 new tokens, two steps; each step's time split
#            and the peak device memory in one table (bench/train/rlstep.sh;
#            not run by default)
# Each step's logs and output go to $OUT (or /tmp/cac-gpu-check); the exit
# status is 0 only if every step asked for passed. Each step fits the device
# tool's 10-minute command limit on 16 cores; run them in separate calls if
# the builds are cold.
set -uo pipefail
cd "$(dirname "$0")/../.."
export OUT=${OUT:-/tmp/cac-gpu-check}
mkdir -p "$OUT"
[ -d .gpu-deps ] || { echo "no .gpu-deps: run scripts/gpu/stage.sh where the compiler is, and carry .gpu-deps"; exit 1; }
steps=("$@")
[ ${#steps[@]} = 0 ] && steps=(tests bench train python)
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
status=0
for s in "${steps[@]}"; do
  echo "== $s ($(date -u +%H:%M:%S))"
  case $s in
  tests) scripts/gpu/kernels/run.sh || status=1 ;;
  bench) # BENCH_ARGS replaces the shapes and methods.
    scripts/gpu/kernels/run.sh --bench ${BENCH_ARGS:---shapes 4096x4096,2048x8192,1024x4096,256x8192,256x4096,8x64 \
      --methods gae,sae,grpo,gae_dense,rloo,spo_chain,sapo,treeadv,spo_tree} \
      --iters 30 || status=1 ;;
  train | nccl) scripts/gpu/cac-run/run.sh || status=1 ;;
  gloo2) scripts/gpu/cac-run/run.sh gloo2 || status=1 ;;
  python) scripts/gpu/python/run.sh || status=1 ;;
  baselines) scripts/gpu/python/run.sh --baselines || status=1 ;;
  main) scripts/gpu/cac-run/run.sh main || status=1 ;;
  memory) scripts/gpu/cac-run/run.sh memory || status=1 ;;
  gen) scripts/gpu/cac-run/run.sh gen || status=1 ;;
  genbf16) scripts/gpu/cac-run/run.sh genbf16 || status=1 ;;
  rlstep) scripts/gpu/cac-run/run.sh rlstep || status=1 ;;
  *) echo "unknown step '$s' (tests, bench, train, gloo2, python, baselines, main, gen, genbf16, rlstep, memory)"; status=2 ;;
  esac
done
exit $status
