#!/bin/bash
# The training loop on a GPU, for a machine with CUDA and a CUDA LibTorch
# (pip's torch) but no MLIR. From the repository root, with .gpu-deps/ from
# scripts/gpu/stage.sh (the compiled stdlib bundles):
#
#   1. builds cac-run against the LibTorch of `python3` (CAC_RUN=PATH skips
#      the build and uses that binary);
#   2. per method (grpo with a k3 KL loss, gae with a value head, gae_dense
#      with the KL in the reward, sapo, sppo with a critic model, spo_chain,
#      spo_tree with its replay buffer, treeadv, and two compiled objectives
#      from bundles: sapo_loss, gspo_token): a tiny file's SFT warm
#      start on the CPU (so that some answers are right and the advantages
#      are not all zero), then its first RL step resumed from that
#      checkpoint on the CPU and on $DEVICE (default cuda). The same weights
#      and the same uniforms sample the same rollouts, so the step's metrics
#      (reward, advantages, losses, gradient norm, KL, clip fraction, eval
#      accuracy) must agree within float tolerance, and all be finite;
#   3. a tiny GRPO run (40 SFT + 2 RL steps) on $DEVICE, then --resume with
#      one more step (checkpoint written from and loaded onto the device);
#   4. unless NCCL=0, the same run with `--gpus 1` (c10d ProcessGroupNCCL on
#      cuda:0): its SFT rows must match the single-process run's, its RL rows
#      one Gloo worker's on the CPU (workers draw rollouts from per-token
#      uniforms, a single process from one generator).
#
# DEVICE=cpu checks the script itself on a machine without a GPU (then the
# two runs of step 2 are the same computation). Logs go to $OUT (or /tmp).
# Exit status 0 only if every step ran and agreed.
#
# `run.sh gloo2` instead checks the data-parallel path of `--gpus N` with
# two ranks sharing one GPU over Gloo (below, at the mode) and prints PASS
# or FAIL; DEVICE=cpu runs the same with CPU ranks.
# `run.sh memory` runs the memory checks on $DEVICE (docs/reliability.md):
# (a) a tiny model whose update's activations cannot fit and (b) a batch
# whose rollouts cannot fit are refused with their messages, (c) a small
# run that fits trains an RL step, and (d), on a GPU, two RL steps whose
# rollouts take half the device run: the second only because the check
# counts the caching allocator's reserved-but-unallocated bytes as free.
#
# `run.sh main` instead trains the embedded default (examples/arith/train.cac
# with the staged grpo bundle) on $DEVICE and prints its accuracy before and
# after RL and its time per phase, for docs/benchmarks.md. `run.sh gen`
# builds bench/generation and prints generation tokens/s with and without the
# KV cache on $DEVICE and on the CPU, for docs/benchmarks.md. `run.sh genbf16`
# builds it too and times bf16 generation at the Qwen2.5-0.5B and 1.5B shapes
# (random weights) against bench/python/generate_baseline.py, a plain
# PyTorch loop run by `python3` on the same device, one model after the
# other, each program under a time limit, with the device memory's peak
# (nvidia-smi, polled) of each, and prints one table (docs/benchmarks.md,
# "Generation at real shapes in bf16"). BUILD_ONLY=1
# builds cac-run and cac-bench-generation and runs nothing; CONFIGURE_ONLY=1
# configures the build and checks that ninja knows how to make both (every
# source present) without building them (scripts/test.sh, whose main build
# compiles the same sources and passes its cac-run as CAC_RUN).
set -uo pipefail
out=${OUT:-/tmp}
mkdir -p "$out"
py=${PYTHON:-$(command -v python3)}
device=${DEVICE:-cuda}
deps=${CAC_GPU_DEPS:-$PWD/.gpu-deps}
bundles=$deps/stdlib-bundles
case "${1:-}" in
gen | genbf16) ;; # generation needs no estimator bundle
*) [ -f "$bundles/grpo/manifest.json" ] ||
  { echo "no $bundles: run scripts/gpu/stage.sh on a machine with the compiler"; exit 1; } ;;
esac
if [ -n "${CAC_RUN:-}" ]; then
  run=$CAC_RUN
else
  # TORCH_PREFIX (a LibTorch's CMake prefix, empty for a system one) and
  # TORCH_LIB override what the Python torch says.
  prefix=${TORCH_PREFIX-$($py -c "import torch; print(torch.utils.cmake_prefix_path)")}
  torchlib=${TORCH_LIB-$(dirname "$($py -c "import torch; print(torch.__file__)")")/lib}
  export PATH=/usr/local/cuda/bin:$PATH
  build=${BUILD:-/tmp/cac-run-gpu}
  cmake -S scripts/gpu/cac-run -B "$build" -G Ninja \
    -DCMAKE_BUILD_TYPE=Release -DCAC_GPU_DEPS="$deps" \
    ${prefix:+-DCMAKE_PREFIX_PATH="$prefix"} >"$out/configure.log" 2>&1 ||
    { tail -60 "$out/configure.log"; exit 1; }
  grep "cac_runtime_train" "$out/configure.log"
  if [ -n "${CONFIGURE_ONLY:-}" ]; then
    ninja -n -C "$build" cac-run cac-bench-generation >"$out/build.log" 2>&1 ||
      { tail -20 "$out/build.log"; exit 1; }
    exit 0
  fi
  target=cac-run
  case "${1:-}" in gen | genbf16) target=cac-bench-generation ;; esac
  [ -n "${BUILD_ONLY:-}" ] && target="cac-run cac-bench-generation"
  ninja -k 0 -C "$build" $target >"$out/build.log" 2>&1 ||
    { grep -A12 "error" "$out/build.log" | head -80; exit 1; }
  [ -n "${BUILD_ONLY:-}" ] && exit 0
  export LD_LIBRARY_PATH=$torchlib:${LD_LIBRARY_PATH:-}
  run=$build/bin/cac-run
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
status=0

if [ "${1:-}" = gen ]; then
  [ -n "${CAC_RUN:-}" ] && gen=$(dirname "$CAC_RUN")/cac-bench-generation ||
    gen=$build/bin/cac-bench-generation
  for d in "$device" cpu; do
    echo "== generation on $d"
    "$gen" --device "$d" ${GEN_ARGS:-} | tee "$out/generation-${d//:/}.md" || exit 1
  done
  exit 0
fi

if [ "${1:-}" = genbf16 ]; then
  [ -n "${CAC_RUN:-}" ] && gen=$(dirname "$CAC_RUN")/cac-bench-generation ||
    gen=$build/bin/cac-bench-generation
  # The issue's shape: 64 prompts x 8 rollouts, 512 new tokens (prompts of
  # 64 tokens); GENBF16_* change it for a dry run (DEVICE=cpu
  # GENBF16_MODELS=tiny ...).
  models=${GENBF16_MODELS:-qwen2.5-0.5b qwen2.5-1.5b}
  shape="--prompts ${GENBF16_PROMPTS:-64} --samples ${GENBF16_SAMPLES:-8}
    --prompt-len ${GENBF16_PROMPT_LEN:-64} --new ${GENBF16_NEW:-512}
    --iters ${GENBF16_ITERS:-1}"
  limit=${GENBF16_TIMEOUT:-150} # seconds per program and model
  rows=$out/genbf16.jsonl
  : >"$rows"
  . scripts/gpu/peak.sh
  for m in $models; do
    for impl in cac python; do
      log=$out/genbf16-$impl-$m.log
      if [ $impl = cac ]; then
        cmd=("$gen" --device "$device" --dtype bf16 --models "$m" --no-uncached $shape --json "$rows")
      else
        cmd=("$py" bench/python/generate_baseline.py --device "$device" --dtype bf16 --model "$m" $shape --json "$rows")
      fi
      echo "== $impl $m ($(date -u +%H:%M:%S))"
      mib=$(peak_mib "$device" "$work/mem.txt" "$log" timeout "$limit" "${cmd[@]}")
      rc=$?
      [ $rc = 0 ] || { echo "$impl $m: exit status $rc (124: over ${limit} s); its log:"; tail -5 "$log"; status=1; }
      echo "{\"impl\": \"$impl\", \"model\": \"$m\", \"peak_mib\": $mib, \"rc\": $rc}" >>"$work/peaks.jsonl"
    done
  done
  grep -h "fused vs plain" "$out"/genbf16-cac-*.log
  $py - "$rows" "$work/peaks.jsonl" "$models" <<'PY' | tee "$out/genbf16.md"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
peaks = {(p["impl"], p["model"]): p for p in map(json.loads, open(sys.argv[2]))}
print("| model | implementation | rows | prompt + new tokens | s | tok/s | "
      "peak device MiB | cac / python |")
print("| --- | --- | --- | --- | --- | --- | --- | --- |")
for m in sys.argv[3].split():
    got = {r["impl"]: r for r in rows if r["model"] == m}
    for impl, name in (("cac", "cac (C++, LibTorch)"),
                       ("python", "plain PyTorch loop")):
        p = peaks.get((impl, m), {})
        r = got.get(impl)
        mib = p.get("peak_mib")
        mib = "-" if mib is None else str(mib)
        if r is None:
            print(f"| {m} | {name} | - | - | - | failed (exit {p.get('rc')}) "
                  f"| {mib} | |")
            continue
        ratio = ""
        if impl == "cac" and "python" in got:
            ratio = f"{r['tokens_per_s'] / got['python']['tokens_per_s']:.2f}x"
        extra = f" ({r['attention']}, torch {r['torch']})" if impl == "python" else ""
        print(f"| {m} | {name}{extra} | {r['rows']} | {r['prompt_tokens']} + "
              f"{r['new_tokens']} | {r['seconds']:.2f} | "
              f"{r['tokens_per_s']:.0f} | {mib} | {ratio} |")
PY
  exit $status
fi

# `run.sh rlstep`: bench/train/rlstep.sh with this cac-run, the staged grpo
# bundle and tokenizer (RLSTEP_* change the shape and the options, e.g.
# RLSTEP_UPDATE="float32 bfloat16" RLSTEP_CKPT="false true" for the update's
# dtype and activation checkpointing; docs/training.md).
if [ "${1:-}" = rlstep ]; then
  CAC_RUN=$run BUNDLE=$bundles/grpo DEVICE=$device OUT=$out PYTHON=$py \
    RLSTEP_TOKENIZER=${RLSTEP_TOKENIZER:-$deps/tokenizers/qwen3} bench/train/rlstep.sh
  exit $?
fi

if [ "${1:-}" = main ]; then
  sed "s|^  estimator *=.*|  estimator = bundle(\"$bundles/grpo\")|" examples/arith/train.cac \
    >"$work/train.cac"
  "$run" "$work/train.cac" --device "$device" --out "$work/main" --no-progress \
    >"$out/main.log" 2>&1 || { echo "the embedded default on $device failed:"; tail -20 "$out/main.log"; exit 1; }
  cp "$work/main/metrics.jsonl" "$out/main-metrics.jsonl"
  grep -h "device \|done in" "$out/main.log"
  $py - "$work/main/metrics.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
sft = [r for r in rows if r.get("phase") == "sft"]
rl = [r for r in rows if r.get("phase") == "rl"]
t = lambda rs, k: sum(r.get(k, 0) for r in rs)
print(f"SFT: {len(sft)} steps, {t(sft, 'time_step_s'):.1f} s; RL: {len(rl)} steps, "
      f"{t(rl, 'time_step_s'):.1f} s (generation {t(rl, 'time_gen_s'):.1f}, scoring "
      f"{t(rl, 'time_score_s'):.1f}, estimator {t(rl, 'time_estimator_s'):.3f}, update "
      f"{t(rl, 'time_update_s'):.1f}); estimator share of RL step time "
      f"{100 * t(rl, 'time_estimator_s') / max(t(rl, 'time_step_s'), 1e-9):.2f}%")
PY
  exit 0
fi

# `run.sh memory`: the memory checks (docs/reliability.md) on $DEVICE.
if [ "${1:-}" = memory ]; then
  if [ -z "${CAC_RUN:-}" ] && [ "${device%%:*}" = cuda ] &&
    ! grep -q "CUDA caching allocator statistics found" "$out/configure.log"; then
    echo "this LibTorch's CUDA caching allocator statistics were not found (configure.log):"
    grep "cac_runtime_train" "$out/configure.log"
    exit 1
  fi
  # memfile NAME MODEL ROLLOUT PROMPTS MINIBATCHES WARM_START STEPS
  memfile() {
    cat >"$work/$1.cac" <<CAC
train memory_$1 {
  model = builtin("custom", $2)
  task = arith(min_level = 1, max_level = 1)
  estimator = bundle("$bundles/grpo")
  critic = none
  rollout = $3
  prompts = $4
  minibatches = $5
  warm_start = $6
  steps = $7
  eval = greedy(every = 100, size = 4)
  threads = 2
  seed = 3
}
CAC
  }
  # refused NAME LABEL TEXT...: cac-run fails on NAME.cac, and its log holds
  # every TEXT; nothing was trained.
  refused() {
    local name=$1 label=$2 rc=0 miss=0
    shift 2
    "$run" "$work/$name.cac" --device "$device" --out "$work/$name" --no-progress \
      >"$out/memory-$name.log" 2>&1 || rc=$?
    [ "$rc" = 0 ] && { echo "$label: not refused:"; tail -5 "$out/memory-$name.log"; status=1; return; }
    for text in "$@"; do
      grep -qF -- "$text" "$out/memory-$name.log" || { echo "$label: no '$text' in:"; miss=1; }
    done
    if [ "$miss" = 1 ] || grep -q '"phase": *"rl"' "$work/$name/metrics.jsonl" 2>/dev/null; then
      tail -5 "$out/memory-$name.log"; status=1; return
    fi
    echo "$label: refused (exit status $rc): $(grep -m1 "error" "$out/memory-$name.log")"
  }
  # rlrows NAME COUNT LABEL: NAME trained, with COUNT RL rows, all finite.
  rlrows() {
    $py - "$work/$1/metrics.jsonl" "$2" "$3" <<'PY'
import json, math, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
rl = [r for r in rows if r.get("phase") == "rl"]
bad = [(k, v) for r in rl for k, v in r.items()
       if isinstance(v, float) and not math.isfinite(v)]
ok = len(rl) == int(sys.argv[2]) and not bad
print(f"{sys.argv[3]}: {len(rl)} RL steps" + ("" if ok else f", expected {sys.argv[2]}; not finite: {bad[:4]}")
      + (f" (last: reward_mean {rl[-1].get('reward_mean')}, loss {rl[-1].get('loss')})" if rl else ""))
sys.exit(0 if ok else 1)
PY
  }
  # (a) A model of a few thousand weights whose update cannot fit: one
  # minibatch of 4096 sequences of about 4100 tokens (the attention's
  # probabilities alone take about 2 TB). Refused before a model exists.
  memfile act "hidden = 16, layers = 1, heads = 2, kv_heads = 1, ffn = 32, max_positions = 8192" \
    "group(n = 4, max_tokens = 4096)" 1024 1 none 1
  refused act "(a) activations on $device" "training needs at least about" " on $device" \
    "the update's activations for a minibatch of 4096 sequences of " " prompt + 4096 new): " \
    "use fewer sequences per minibatch (prompts 1024 x 4 rollouts / minibatches 1)"
  # (b) 1M prompts x 4 rollouts of a model whose KV cache takes 128 KiB a
  # token (about 4.5 TiB): the update's minibatches of 4 sequences fit, the
  # rollouts do not. Refused at RL step 1's first prompt.
  memfile kv "hidden = 512, layers = 32, heads = 8, kv_heads = 8, ffn = 32, max_positions = 32" \
    "group(n = 4, max_tokens = 4)" 1000000 1000000 none 1
  refused kv "(b) rollouts on $device" "RL step 1: the rollouts need at least about" \
    " on $device" "(4000000 rows = 1000000 prompts x 4, " \
    "of memory available; lower prompts, the rollouts per prompt or max_tokens"
  # (c) A small run that fits: SFT, then an RL step.
  memfile fit "hidden = 32, layers = 2, heads = 2, kv_heads = 1, ffn = 64, max_positions = 64" \
    "group(n = 4, max_tokens = 8)" 8 2 "sft(steps = 20, batch = 16, lr = 1e-2)" 1
  if "$run" "$work/fit.cac" --device "$device" --out "$work/fit" --no-progress \
    >"$out/memory-fit.log" 2>&1; then
    rlrows fit 1 "(c) a run that fits on $device" || status=1
  else
    echo "(c) a run that fits on $device failed:"; tail -10 "$out/memory-fit.log"; status=1
  fi
  # (d) On a GPU: two RL steps whose rollouts' estimate E is half the
  # device. Step 1 holds the prompts' KV cache (E/4) and the forked rows'
  # (E) at once, so LibTorch's caching allocator keeps at least 1.25 E
  # reserved after it; the driver then reports at most 0.75 of the device
  # free, less than E. Step 2 runs only because the check counts the
  # allocator's reserved-but-unallocated bytes as free.
  # MEMORY_TOTAL_MIB=N runs it elsewhere as if the device had N MiB (the
  # CPU dry run: the same files and checks, but no cache to count).
  if [ "${device%%:*}" = cuda ] || [ -n "${MEMORY_TOTAL_MIB:-}" ]; then
    prompt=$(sed -n 's/.*prompts x 4, \([0-9]*\) prompt + 4 new tokens.*/\1/p' "$out/memory-kv.log" | head -1)
    index=${device#cuda}; index=${index#:}
    total=${MEMORY_TOTAL_MIB:-$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits -i "${index:-0}" 2>/dev/null | head -1)}
    if [ -z "$prompt" ] || [ -z "$total" ]; then
      echo "(d) cannot size the run (prompt tokens '$prompt', device MiB '$total')"; status=1
    else
      # hidden 512, 8 layers, 8 KV heads of 64: 2 x 8 x 512 x 4 bytes a token.
      rows=$(( total * 1048576 / 2 / ((prompt + 16) * 32768) ))
      prompts=$(( rows / 4 ))
      minibatches=$(( prompts * 4 / 1024 + 1 ))
      memfile cache "hidden = 512, layers = 8, heads = 8, kv_heads = 8, ffn = 64, max_positions = 64" \
        "group(n = 4, max_tokens = 16)" "$prompts" "$minibatches" none 2
      echo "(d) $prompts prompts x 4 rollouts of $prompt + 16 tokens: about $(( prompts * 4 * (prompt + 16) * 32768 / 1048576 )) MiB of KV cache of the device's $total MiB"
      if "$run" "$work/cache.cac" --device "$device" --out "$work/cache" --no-progress \
        >"$out/memory-cache.log" 2>&1; then
        rlrows cache 2 "(d) rollouts of half the device, twice, on $device" || status=1
      else
        echo "(d) rollouts of half the device, twice, on $device failed:"
        tail -10 "$out/memory-cache.log"; status=1
      fi
    fi
  else
    echo "(d) skipped on $device (no caching allocator)"
  fi
  exit $status
fi

# tiny NAME BUNDLE ESTIMATOR-ARGS CRITIC ROLLOUT EXTRA: a training file of
# 150 SFT steps and one RL step.
tiny() {
  cat >"$work/$1.cac" <<CAC
train tiny_$1 {
  model = builtin("custom", hidden = 32, layers = 2, heads = 2, kv_heads = 1, ffn = 64, max_positions = 64)
  task = arith(min_level = 1, max_level = 1)
  estimator = bundle("$bundles/$2"$3)
  critic = $4
  rollout = $5
  prompts = 8
  minibatches = 2
  warm_start = sft(steps = 150, batch = 16, lr = 1e-2)
  steps = 1
  eval = greedy(every = 1, size = 32)
  threads = 2
  seed = 3
  $6
}
CAC
}
tiny grpo grpo "" none "group(n = 4, max_tokens = 8)" "kl = k3(coef = 0.05)"
tiny gae gae ", gamma = 1.0, lambda = 0.95" "value_head(coef = 0.5, clip = 0.2)" \
  "group(n = 4, max_tokens = 8)" ""
tiny gae_dense gae_dense ", gamma = 1.0, lambda = 0.95" "value_head(coef = 0.5)" \
  "group(n = 4, max_tokens = 8)" "kl = k1(coef = 0.01, in_reward = 1)"
tiny sapo sapo ", gamma = 1.0, lambda = 0.99, k_percent = 30" \
  "value_head(coef = 0.5, clip = 0.2)" "group(n = 4, max_tokens = 8)" ""
tiny sppo sppo "" 'value_model(builtin("custom", hidden = 16, layers = 1, heads = 2, kv_heads = 1, ffn = 32, max_positions = 64), coef = 0.5)' \
  "group(n = 1, max_tokens = 8)" ""
tiny spo_chain spo_chain ", threshold = 0.9, interval = 3" none \
  "chain(n = 4, samples = 2, max_tokens = 8)" "whiten = true"
tiny spo_tree spo_tree ", threshold = 0.9" none \
  'tree(branches = "4-2", seg_len = 3, max_tokens = 8, replay_steps = 2, replay_take = 2)' \
  "whiten = true"
tiny treeadv treeadv "" none \
  'forest(n = 4, trees = 2, children = 2, tau = 0.5, max_tokens = 8)' ""
# Compiled objectives (their kernels give the loss and the gradient), from
# bundles: SAPO's segment ratio reading the critic's value and the reward,
# and GSPO's token form on GRPO's advantages.
tiny sapo_segment sapo ", gamma = 1.0, lambda = 0.99, k_percent = 30" \
  "value_head(coef = 0.5, clip = 0.2)" "group(n = 4, max_tokens = 8)" \
  "objective = bundle(\"$bundles/sapo_loss\", eps_low = 0.2, eps_high = 0.28, dual_clip = 3,
    sapo_gamma = 1.0, sapo_lambda = 0.99, sapo_k_percent = 30)"
tiny gspo grpo "" none "group(n = 4, max_tokens = 8)" \
  "objective = bundle(\"$bundles/gspo_token\", eps_low = 3e-4, eps_high = 4e-4)
  aggregation = \"seq-mean-token-mean\""

compare() { # A.jsonl B.jsonl ROWS LABEL [signal]: metrics within tolerance;
  # with `signal`, the last row's update must have moved the weights
  $py - "$@" <<'PY'
import json, math, sys
a = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
b = [json.loads(l) for l in open(sys.argv[2]) if l.strip()]
rows, label = int(sys.argv[3]), sys.argv[4]
signal = len(sys.argv) > 5 and sys.argv[5] == "signal"
if len(a) != rows or len(b) != rows:
    print(f"{label}: {len(a)} and {len(b)} metric rows, expected {rows}")
    sys.exit(1)
bad, nonfinite = [], []
skip = ("elapsed_s", "tokens_per_s")
for i, (x, y) in enumerate(zip(a, b)):
    for k, v in y.items():
        if k.startswith("time_") or k in skip:
            continue
        w = x.get(k)
        for z in (v, w):
            if isinstance(z, float) and not math.isfinite(z):
                nonfinite.append((i, k, z))
        if isinstance(v, float):
            if w is None or abs(w - v) > 1e-4 + 2e-3 * abs(v):
                bad.append((i, k, w, v))
        elif w != v:
            bad.append((i, k, w, v))
quiet = signal and not b[-1].get("grad_norm", 0) > 0
ok = not bad and not nonfinite and not quiet
last = b[-1]
print(f"{label}: " + ("same metrics" if ok else
      f"{len(bad)} differ, e.g. {bad[:4]}; not finite: {nonfinite[:4]}" +
      ("; the last update has no gradient" if quiet else "")) +
      f" (last row: reward_mean {last.get('reward_mean')}, "
      f"grad_norm {last.get('grad_norm')}, loss {last.get('loss')})")
sys.exit(0 if ok else 1)
PY
}

# `run.sh gloo2`: the data-parallel code path of `--gpus N` with two ranks
# on one GPU. NCCL refuses two ranks on one device, so they all-reduce with
# Gloo on their CUDA tensors: `--workers N --device cuda` is `--gpus N` with
# Gloo for NCCL (the launcher, the rank->device mapping, the gradient buckets
# and the metric sums are the same code; docs/training.md). A tiny GRPO file
# trained by one rank on $DEVICE and by two ranks sharing it must log the
# same metrics (the data-parallel equality of the CPU's `--workers 1` vs
# `--workers 2` test), and the two-rank run stopped after its first RL step
# and `--resume`d must log the uninterrupted one's. Prints PASS or FAIL.
if [ "${1:-}" = gloo2 ]; then
  fail() {
    echo "gloo2: FAIL: $*"
    if grep -q "without ProcessGroupGloo" "$out"/gloo2-*.log 2>/dev/null; then
      [ -f "$deps/include/gloo/algorithm.h" ] ||
        echo "no $deps/include/gloo: run scripts/gpu/stage.sh again where the compiler is (it stages Gloo's headers) and carry .gpu-deps"
      grep -h "ProcessGroupGloo" "$out/configure.log" 2>/dev/null
      # Why the configure check did not compile, where the build is here.
      grep -h -m5 "error:" "${build:-/nonexistent}/CMakeFiles/CMakeConfigureLog.yaml" \
        "${build:-/nonexistent}/CMakeFiles/CMakeError.log" 2>/dev/null
    fi
    exit 1
  }
  case $device in
  cpu) ranks="cpu, cpu" ;;
  cuda) # as many GPUs as cac-run's LibTorch sees (CUDA_VISIBLE_DEVICES)
    gpus=$($py -c "import torch; print(torch.cuda.device_count())" 2>/dev/null)
    [ "${gpus:-0}" -ge 1 ] 2>/dev/null || fail "torch sees no GPU ('$gpus')"
    ranks="cuda:0, cuda:$((1 % gpus))" ;;
  *) ranks="$device, $device" ;;
  esac
  cat >"$work/dp.cac" <<CAC
train dp {
  model = builtin("custom", hidden = 16, layers = 1, heads = 2, kv_heads = 1, ffn = 32, max_positions = 32)
  task = arith(min_level = 1, max_level = 1)
  estimator = bundle("$bundles/grpo")
  critic = none
  rollout = group(n = 4, max_tokens = 4)
  prompts = 8
  minibatches = 2
  warm_start = sft(steps = 40, batch = 8, lr = 1e-2)
  steps = 2
  eval = greedy(every = 1, size = 6)
  checkpoint_every = 1
  threads = 1
  seed = 5
}
CAC
  g2run() { # NAME ARGS...: dp.cac on $DEVICE, its log in $out/gloo2-NAME.log
    local name=$1
    shift
    "$run" "$work/dp.cac" --device "$device" --no-progress "$@" \
      >"$out/gloo2-$name.log" 2>&1 ||
      { tail -20 "$out/gloo2-$name.log"; fail "the run '$name' ($*) failed"; }
  }
  g2run one --workers 1 --out "$work/g-one"
  g2run two --workers 2 --out "$work/g-two"
  grep -h "workers (" "$out/gloo2-one.log" "$out/gloo2-two.log"
  grep -q "2 workers (gloo on $ranks)" "$out/gloo2-two.log" ||
    fail "the two ranks did not run on $ranks over Gloo (gloo2-two.log above)"
  g2run cut --workers 2 --steps 1 --out "$work/g-cut"
  g2run resume --workers 2 --resume --out "$work/g-cut"
  grep -h "resuming" "$out/gloo2-resume.log"
  cp "$work/g-one/metrics.jsonl" "$out/gloo2-one-metrics.jsonl"
  cp "$work/g-two/metrics.jsonl" "$out/gloo2-two-metrics.jsonl"
  ok=1
  compare "$work/g-one/metrics.jsonl" "$work/g-two/metrics.jsonl" 43 \
    "one rank vs two ranks on $ranks (gloo)" signal || ok=0
  compare "$work/g-two/metrics.jsonl" "$work/g-cut/metrics.jsonl" 43 \
    "two ranks: stopped after RL step 1 and --resume'd vs uninterrupted" signal || ok=0
  [ $ok = 1 ] || fail "the metrics differ (above)"
  echo "gloo2: PASS: two ranks on $ranks over Gloo give one rank's metrics, and their --resume the uninterrupted run's"
  exit 0
fi

# 2. Per method: SFT on the CPU, then one RL step on the CPU and on the
# device from its checkpoint.
for m in grpo gae gae_dense sapo sppo spo_chain spo_tree treeadv sapo_segment gspo; do
  "$run" "$work/$m.cac" --steps 0 --out "$work/$m-sft" --no-progress \
    >"$out/sft-$m.log" 2>&1 ||
    { echo "$m: SFT failed:"; tail -20 "$out/sft-$m.log"; status=1; continue; }
  for side in cpu:cpu "dev:$device"; do
    tag=$m-${side%%:*} d=${side#*:}
    cp -r "$work/$m-sft" "$work/$tag"
    "$run" "$work/$m.cac" --device "$d" --out "$work/$tag" --resume --no-progress \
      >"$out/train-$tag.log" 2>&1 ||
      { echo "$m on $d failed:"; tail -20 "$out/train-$tag.log"; status=1; }
  done
  [ -f "$work/$m-cpu/metrics.jsonl" ] && [ -f "$work/$m-dev/metrics.jsonl" ] &&
    { compare "$work/$m-cpu/metrics.jsonl" "$work/$m-dev/metrics.jsonl" 152 \
        "$m: cpu vs $device, one RL step after SFT" signal || status=1; }
done

# 3. SFT + RL on the device, then a resumed step.
cat >"$work/long.cac" <<CAC
train tiny {
  model = builtin("custom", hidden = 16, layers = 1, heads = 2, kv_heads = 1, ffn = 32, max_positions = 32)
  task = arith(min_level = 1, max_level = 1)
  estimator = bundle("$bundles/grpo")
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
"$run" "$work/long.cac" --device "$device" --out "$work/long" --no-progress \
  >"$out/long.log" 2>&1 || { echo "40 SFT + 2 RL on $device failed:"; tail -20 "$out/long.log"; status=1; }
grep -h "device \|done in" "$out/long.log"
"$run" "$work/long.cac" --device "$device" --out "$work/long" --no-progress --resume --steps 3 \
  >"$out/resume.log" 2>&1 || { echo "--resume on $device failed:"; tail -20 "$out/resume.log"; status=1; }
rows=$(grep -c . "$work/long/metrics.jsonl" 2>/dev/null || echo 0)
[ "$rows" = 44 ] && echo "resume on $device: 44 metric rows" ||
  { echo "resume on $device: $rows metric rows, expected 44"; status=1; }

# 4. The same run as one NCCL worker on cuda:0. Workers draw each token's
# uniform from (seed, step, prompt, stream, position), so that the rollouts
# do not depend on the worker count; a single process draws from one
# sequential generator. The SFT rows and the eval before RL are the same
# computation as step 3's; the RL rows are compared with one Gloo worker on
# the CPU where this cac-run has Gloo (pip's LibTorch ships no Gloo headers;
# scripts/gpu/stage.sh stages Debian's: without them the first RL row is
# printed, to compare with `cac-run --workers 1` on a machine that has it).
if [ "${NCCL:-1}" = 1 ]; then
  "$run" "$work/long.cac" --gpus 1 --out "$work/nccl" --no-progress \
    >"$out/nccl.log" 2>&1 || { echo "--gpus 1 failed:"; tail -20 "$out/nccl.log"; status=1; }
  grep -h "workers (" "$out/nccl.log"
  cp "$work/nccl/metrics.jsonl" "$out/nccl-metrics.jsonl" 2>/dev/null
  head -n 41 "$work/long/metrics.jsonl" >"$work/single-sft.jsonl"
  head -n 41 "$work/nccl/metrics.jsonl" >"$work/nccl-sft.jsonl" 2>/dev/null
  compare "$work/single-sft.jsonl" "$work/nccl-sft.jsonl" 41 \
    "--gpus 1 (nccl) vs --device $device, SFT and the eval before RL" || status=1
  if "$run" "$work/long.cac" --workers 1 --device cpu --out "$work/gloo" --no-progress \
    >"$out/gloo.log" 2>&1; then
    compare "$work/gloo/metrics.jsonl" "$work/nccl/metrics.jsonl" 43 \
      "--gpus 1 (nccl) vs --workers 1 (gloo, cpu)" || status=1
  else
    echo "no Gloo worker here ($(tail -1 "$out/gloo.log")); the first RL row of --gpus 1:"
    sed -n 42p "$work/nccl/metrics.jsonl"
  fi
fi
exit $status
