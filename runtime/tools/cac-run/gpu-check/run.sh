#!/bin/bash
# On the GPU machine, from the repository root, with .gpu-deps/ from
# test/Unit/Kernels/gpu-check/stage.sh (it compiles the grpo bundle there):
# builds cac-run against the CUDA LibTorch of `python3`, then trains a tiny
# GRPO file (40 SFT + 2 RL steps) with `--gpus 1` (c10d ProcessGroupNCCL) and
# with `--workers 1` (ProcessGroupGloo) and requires the same metrics within
# float tolerance (the NCCL path all-reduces the same gradients on the GPU).
# Logs go to $OUT (or /tmp) when set. Exit status 0 only if both ran and agree.
set -uo pipefail
out=${OUT:-/tmp}
py=${PYTHON:-$(command -v python3)}
# TORCH_PREFIX (a LibTorch's CMake prefix, empty for a system one) and
# TORCH_LIB override what the Python torch says.
prefix=${TORCH_PREFIX-$($py -c "import torch; print(torch.utils.cmake_prefix_path)")}
torchlib=${TORCH_LIB-$(dirname "$($py -c "import torch; print(torch.__file__)")")/lib}
export PATH=/usr/local/cuda/bin:$PATH
build=${BUILD:-/tmp/cac-run-gpu}
deps=${CAC_GPU_DEPS:-$PWD/.gpu-deps}
bundle=$deps/stdlib-bundles/grpo
[ -f "$bundle/manifest.json" ] ||
  { echo "no $bundle: run test/Unit/Kernels/gpu-check/stage.sh on a machine with the compiler"; exit 1; }
cmake -S runtime/tools/cac-run/gpu-check -B "$build" -G Ninja \
  -DCMAKE_BUILD_TYPE=Release -DCAC_GPU_DEPS="$deps" \
  ${prefix:+-DCMAKE_PREFIX_PATH="$prefix"} >"$out/configure.log" 2>&1 ||
  { tail -60 "$out/configure.log"; exit 1; }
grep "cac_runtime_train" "$out/configure.log"
ninja -C "$build" cac-run >"$out/build.log" 2>&1 ||
  { grep -A12 "error" "$out/build.log" | head -80; exit 1; }
export LD_LIBRARY_PATH=$torchlib:${LD_LIBRARY_PATH:-}
work=$(mktemp -d)
cat >"$work/train.cac" <<CAC
train tiny {
  model = builtin("custom", hidden = 16, layers = 1, heads = 2, kv_heads = 1, ffn = 32, max_positions = 32)
  task = arith(min_level = 1, max_level = 1)
  estimator = bundle("$bundle")
  critic = none
  rollout = group(n = 4, max_tokens = 4)
  prompts = 4
  minibatches = 2
  warm_start = sft(steps = 40, batch = 8, lr = 1e-2)
  steps = 2
  eval = greedy(every = 1, size = 6)
  threads = 1
  seed = 5
}
CAC
status=0
"$build/bin/cac-run" "$work/train.cac" --gpus 1 --out "$work/nccl" --no-progress \
  >"$out/nccl.log" 2>&1 || { echo "--gpus 1 failed:"; tail -20 "$out/nccl.log"; status=1; }
"$build/bin/cac-run" "$work/train.cac" --workers 1 --out "$work/gloo" --no-progress \
  >"$out/gloo.log" 2>&1 || { echo "--workers 1 failed:"; tail -20 "$out/gloo.log"; status=1; }
grep -h "workers (" "$out/nccl.log" "$out/gloo.log"
[ $status = 0 ] && $py - "$work/nccl/metrics.jsonl" "$work/gloo/metrics.jsonl" <<'PY' || status=1
import json, sys
a = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
b = [json.loads(l) for l in open(sys.argv[2]) if l.strip()]
assert len(a) == len(b) == 43, (len(a), len(b))
bad = []
for i, (x, y) in enumerate(zip(a, b)):
    for k, v in y.items():
        if k.startswith("time_") or k in ("elapsed_s", "tokens_per_s"):
            continue
        w = x.get(k)
        if isinstance(v, float):
            if w is None or abs(w - v) > 1e-5 + 1e-4 * abs(v):
                bad.append((i, k, w, v))
        elif w != v:
            bad.append((i, k, w, v))
print("nccl vs gloo:", "same metrics" if not bad else f"{len(bad)} differ, e.g. {bad[:3]}")
sys.exit(1 if bad else 0)
PY
rm -rf "$work"
exit $status
