#!/usr/bin/env bash
# The RL step at a real model's shape: one GRPO run per model of
# bench/train/rlstep.cac.in (random weights of the public architecture,
# the Qwen3 tokenizer, GSM8K-format prompts in Qwen's chat format, rollouts
# sampled in bfloat16, the policy in float32, its update in update_dtype,
# with or without activation checkpointing), and a table of each step's
# time split (generation, scoring, estimator, update), the generation's
# tokens/s and the peak device memory (docs/training.md,
# "What size trains on what hardware").
#
#   CAC_RUN=build/bin/cac-run BUNDLE=DIR [DEVICE=cuda] [OUT=/tmp/rlstep]
#   [RLSTEP_MODELS="qwen2.5-0.5b"] [RLSTEP_LAYERS=N] [RLSTEP_PROMPTS=64]
#   [RLSTEP_SAMPLES=8] [RLSTEP_NEW=512] [RLSTEP_MINIBATCHES=16]
#   [RLSTEP_STEPS=2] [RLSTEP_TOKENIZER=.deps/tokenizers/qwen3]
#   [RLSTEP_MATMUL="highest" (float32_matmul_precision of each run, a list:
#   "highest high" runs each model twice, float32 and TF32 products)]
#   [RLSTEP_UPDATE="float32" (update_dtype of each run, a list: "float32
#   bfloat16")] [RLSTEP_CKPT="false" (activation_checkpointing of each run,
#   a list: "false true")]
#   [RLSTEP_TIMEOUT=300 (seconds per model)] bench/train/rlstep.sh
#
# BUNDLE is a compiled stdlib/grpo.cac (`cac compile stdlib/grpo.cac -o
# /dev/null --bundle DIR`; scripts/gpu/stage.sh stages one, and the tokenizer).
# The issue's shape is the default: 64 prompts x 8 rollouts, 512 new tokens.
# A CPU dry run of the script: DEVICE=cpu RLSTEP_LAYERS=2 RLSTEP_PROMPTS=2
# RLSTEP_SAMPLES=2 RLSTEP_NEW=8 RLSTEP_MINIBATCHES=1 RLSTEP_STEPS=1. Prints
# the table and writes it to $OUT/rlstep.md.
set -uo pipefail
cd "$(dirname "$0")/../.."
: "${CAC_RUN:?set CAC_RUN to a cac-run}" "${BUNDLE:?set BUNDLE to a compiled grpo bundle}"
out=${OUT:-/tmp/rlstep}
device=${DEVICE:-cuda}
tok=$(cd "${RLSTEP_TOKENIZER:-.deps/tokenizers/qwen3}" && pwd) ||
  { echo "no tokenizer folder ${RLSTEP_TOKENIZER:-.deps/tokenizers/qwen3} (scripts/setup.sh installs it)"; exit 1; }
bundle=$(cd "$BUNDLE" && pwd) || exit 1
py=${PYTHON:-$(command -v python3)}
mkdir -p "$out"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
. scripts/gpu/peak.sh
status=0
: >"$work/runs.jsonl"
for m in ${RLSTEP_MODELS:-qwen2.5-0.5b}; do
  for p in ${RLSTEP_MATMUL:-highest}; do
  for u in ${RLSTEP_UPDATE:-float32}; do
  for c in ${RLSTEP_CKPT:-false}; do
    # The default options keep the runs' names of the earlier tables.
    tag=$m-$p
    [ "$u" = float32 ] || tag=$tag-$u
    [ "$c" = false ] || tag=$tag-ckpt
    sed -e "s|@MODEL@|$m|" -e "s|@LAYERS@|${RLSTEP_LAYERS:+layers = $RLSTEP_LAYERS, }|" \
      -e "s|@TOKENIZER@|$tok|" -e "s|@DATA@|$PWD/examples/gsm8k|g" -e "s|@BUNDLE@|$bundle|" \
      -e "s|@PROMPTS@|${RLSTEP_PROMPTS:-64}|" -e "s|@SAMPLES@|${RLSTEP_SAMPLES:-8}|" -e "s|@NEW@|${RLSTEP_NEW:-512}|" \
      -e "s|@MINIBATCHES@|${RLSTEP_MINIBATCHES:-16}|" -e "s|@STEPS@|${RLSTEP_STEPS:-2}|" \
      -e "s|@MATMUL@|$p|" -e "s|@UPDATE@|$u|" -e "s|@CKPT@|$c|" \
      bench/train/rlstep.cac.in >"$work/$tag.cac"
    log=$out/rlstep-$tag.log
    echo "== $m, float32 matmul $p, update $u, checkpointing $c, on $device ($(date -u +%H:%M:%S))"
    mib=$(peak_mib "$device" "$work/mem.txt" "$log" timeout "${RLSTEP_TIMEOUT:-300}" \
      "$CAC_RUN" "$work/$tag.cac" --device "$device" --out "$work/$tag" --no-progress)
    rc=$?
    [ $rc = 0 ] || { echo "$tag: exit status $rc (124: over ${RLSTEP_TIMEOUT:-300} s); its log:"; tail -8 "$log"; status=1; }
    [ -f "$work/$tag/metrics.jsonl" ] && cp "$work/$tag/metrics.jsonl" "$out/rlstep-$tag-metrics.jsonl"
    echo "{\"model\": \"$m\", \"matmul\": \"$p\", \"update\": \"$u\", \"ckpt\": \"$c\", \"tag\": \"$tag\", \"peak_mib\": $mib, \"rc\": $rc}" >>"$work/runs.jsonl"
  done
  done
  done
done
$py - "$work/runs.jsonl" "$out" "$device" "${RLSTEP_LAYERS:-}" "${RLSTEP_PROMPTS:-64}" "${RLSTEP_SAMPLES:-8}" <<'PY' | tee "$out/rlstep.md"
import json, os, sys
runs, out, device, layers, prompts, samples = sys.argv[1:7]
n = int(prompts) * int(samples)
print("| model | layers | float32 matmul | update dtype | checkpointed layers | device | rollouts | "
      "new tokens | RL step | step s | generation s | scoring s | estimator s | update s | "
      "generation tok/s | peak device MiB |")
print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
for run in map(json.loads, open(runs)):
    m, p, u, c = run["model"], run["matmul"], run["update"], run["ckpt"]
    opts = f"{m} | {layers or 'all'} | {p} | {u} | {'yes' if c == 'true' else 'no'}"
    path = os.path.join(out, f"rlstep-{run['tag']}-metrics.jsonl")
    rows = [json.loads(l) for l in open(path) if l.strip()] if os.path.exists(path) else []
    rl = [r for r in rows if r.get("phase") == "rl"]
    if not rl:
        print(f"| {opts} | {device} | {n} | | | exit {run['rc']} | | | | | | |")
        continue
    for r in rl:
        new = r["response_len"] * n
        mib = run["peak_mib"] if run["peak_mib"] is not None else "-"
        print(f"| {opts} | {device} | {n} | {new:.0f} | {r['rl_step']} | "
              f"{r['time_step_s']:.2f} | {r['time_gen_s']:.2f} | {r['time_score_s']:.2f} | "
              f"{r['time_estimator_s']:.4f} | {r['time_update_s']:.2f} | "
              f"{new / r['time_gen_s']:.0f} | {mib} |")
PY
exit $status
