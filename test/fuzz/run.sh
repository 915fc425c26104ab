#!/usr/bin/env bash
# Builds the libFuzzer targets (clang, ASan + UBSan) in build-fuzz/ and
# fuzzes them one after another, single process each, from their seed
# corpora (README.md):
#
#   test/fuzz/run.sh [SECONDS] [TARGET...]   each TARGET for SECONDS (120)
#   test/fuzz/run.sh --ci [TARGET...]        each TARGET for its CI budget
#   test/fuzz/run.sh 0 [TARGET...]           build only
#
# TARGET: frontend batch cacargs trainfile jsonl config chattemplate
# safetensors checkpoint runargs (all of them when none is named; the last three need LibTorch). The
# CI budget of a reader is a number of inputs (-runs=N, a condition, so a
# busy machine is slower but runs the same test); the front end's is
# CAC_FUZZ_SECONDS (150) of wall time.
#
# Exit status 0: no crash. 1: a crash, sanitizer report, timeout (hang) or
# out-of-memory; the input is kept in build-fuzz/crashes/ and printed.
# 2: the build failed or a bad argument. Environment: CAC_FUZZ_BUILD_DIR
# (build-fuzz), CAC_FUZZ_JOBS (2), CAC_FUZZ_STAGE (mlir|cpu|llvm, see
# FuzzFrontend.cpp).
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=${CAC_FUZZ_BUILD_DIR:-build-fuzz}
JOBS=${CAC_FUZZ_JOBS:-2}
CLANG=${CAC_FUZZ_CC:-clang-19}
CLANGXX=${CAC_FUZZ_CXX:-clang++-19}
ALL=(frontend batch cacargs trainfile jsonl config chattemplate safetensors checkpoint runargs)

DURATION=120
CI=0
if [ $# -gt 0 ]; then
  case "$1" in
    --ci) CI=1; shift;;
    ''|*[!0-9]*) ;;
    *) DURATION=$1; shift;;
  esac
fi
TARGETS=("$@")
if [ ${#TARGETS[@]} = 0 ]; then TARGETS=("${ALL[@]}"); fi
for t in "${TARGETS[@]}"; do
  case " ${ALL[*]} " in
    *" $t "*) ;;
    *) echo "usage: $0 [SECONDS|--ci] [TARGET...]; TARGET: ${ALL[*]}" >&2; exit 2;;
  esac
done

# Inputs of each reader in CI: a few seconds each on two busy cores.
ci_runs() {
  case "$1" in
    batch) echo 20000;;
    cacargs) echo 20000;;
    trainfile) echo 4000;;
    jsonl) echo 2000;;
    config) echo 4000;;
    chattemplate) echo 4000;;
    safetensors) echo 4000;;
    checkpoint) echo 300;;
    runargs) echo 20000;;
  esac
}

launcher=()
if command -v ccache > /dev/null; then
  launcher=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
fi
t0=$(date +%s)
# -O1 -g without -DNDEBUG: assertions stay on in our code and in the inline
# LLVM/MLIR code it instantiates (casts, builders).
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_C_COMPILER="$CLANG" -DCMAKE_CXX_COMPILER="$CLANGXX" \
  -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O1 -g" -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g" \
  "${launcher[@]}" -DCAC_FUZZ=ON -DCAC_ENABLE_TORCH=OFF -DCAC_ENABLE_CUDA=OFF \
  -DCAC_ENABLE_TESTS=OFF > "$BUILD.configure.log" 2>&1 \
  || { cat "$BUILD.configure.log"; exit 2; }
build_targets=()
for t in "${TARGETS[@]}"; do build_targets+=("cac-fuzz-$t"); done
cmake --build "$BUILD" --target "${build_targets[@]}" -j"$JOBS" || exit 2
t1=$(date +%s)
echo "cac fuzz: built ${build_targets[*]} in $((t1 - t0)) s"
if [ "$CI" = 0 ] && [ "$DURATION" = 0 ]; then exit 0; fi  # build only

symbolizer=/usr/lib/llvm-19/bin/llvm-symbolizer
if [ -x "$symbolizer" ]; then export ASAN_SYMBOLIZER_PATH=$symbolizer; fi
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}

# Copies FILES... into DIR (named by their paths, so equal names differ).
copy_seeds() {
  local dir=$1; shift
  local f
  for f in "$@"; do
    [ -f "$f" ] && cp "$f" "$dir/$(echo "$f" | tr / _)"
  done
  return 0
}

# Fills $BUILD/seeds-TARGET (the frontend's: $BUILD/seeds) afresh; the corpus
# each target grows stays between local runs.
seed() {
  local t=$1 dir=$2
  rm -rf "$dir"
  mkdir -p "$dir"
  case "$t" in
    # Only .cac sources and the fuzz-*.test regression inputs (cac files
    # whose RUN lines are comments). test/fuzz/seeds/*.cac hold imports that
    # resolve from the repository root, where the fuzzer runs: an input is
    # the buffer "fuzz.cac", whose imports are relative to the working
    # directory.
    frontend) copy_seeds "$dir" stdlib/*.cac examples/estimators/*.cac \
      test/DSL/*.cac test/Inputs/imports/*.cac test/Unit/Eager/inputs/*.cac \
      test/fuzz/seeds/*.cac test/DSL/fuzz-*.test;;
    batch) copy_seeds "$dir" examples/batches/*.json test/Stdlib/Inputs/*.json \
      test/fuzz/seeds/batch/*;;
    trainfile) copy_seeds "$dir" examples/*/train*.cac test/fuzz/seeds/trainfile/*;;
    # The checkpoint a trainer with the target's tiny policy saves, packed.
    checkpoint) copy_seeds "$dir" test/fuzz/seeds/checkpoint/*
      CAC_FUZZ_WRITE_SEED="$dir/saved" "$BUILD/bin/cac-fuzz-checkpoint" \
        > /dev/null 2>&1 || { echo "cac fuzz: cannot write the checkpoint seed"; return 1; };;
    *) copy_seeds "$dir" test/fuzz/seeds/"$t"/*;;
  esac
}

# The inputs libFuzzer kept of TARGET's failures (not its slow-unit-*
# files: an input slower than 10 s is reported, not failed, as a loaded
# machine can stall any input; another target's files are not counted, so
# runs of several targets at once do not disturb each other).
failures() {
  ls "$BUILD/crashes" | grep -cE "^$1-(crash|timeout|oom|leak)-" || true
}

# fuzz_one TARGET: fuzzes TARGET for its budget; exit status 1 on a failure.
fuzz_one() {
  local t=$1 opts suffix budget seeds corpus log crashes_before rc t2 t3
  opts=(-max_len=4096 -timeout=10 -rss_limit_mb=2048)
  case "$t" in
    frontend) suffix=""; opts=(-dict=test/fuzz/cac.dict -max_len=4096 -timeout=60 -rss_limit_mb=4096);;
    batch) suffix=-$t; opts+=(-dict=test/fuzz/batch.dict);;
    trainfile) suffix=-$t; opts+=(-dict=test/fuzz/train.dict);;
    chattemplate) suffix=-$t; opts+=(-dict=test/fuzz/chattemplate.dict);;
    checkpoint) suffix=-$t; opts=(-max_len=65536 -timeout=30 -rss_limit_mb=2048 -dict=test/fuzz/checkpoint.dict);;
    # cac-run's messages and usage would fill the log: stdout and stderr
    # are closed (libFuzzer's and the sanitizers' reports still show).
    runargs) suffix=-$t; opts+=(-close_fd_mask=3 -dict=test/fuzz/runargs.dict);;
    cacargs) suffix=-$t; opts+=(-close_fd_mask=3 -dict=test/fuzz/cacargs.dict);;
    *) suffix=-$t;;
  esac
  if [ "$CI" = 1 ] && [ "$t" != frontend ]; then
    budget=(-runs="$(ci_runs "$t")")
  elif [ "$CI" = 1 ]; then
    budget=(-max_total_time="${CAC_FUZZ_SECONDS:-150}")
  else
    budget=(-max_total_time="$DURATION")
  fi
  seeds="$BUILD/seeds$suffix" corpus="$BUILD/corpus$suffix"
  log="$BUILD/fuzz$suffix.log"
  seed "$t" "$seeds" || return 1
  mkdir -p "$corpus"
  crashes_before=$(failures "$t")
  echo "cac fuzz: $t, ${budget[*]} (log: $log)"
  # Leak checks are off: the front end's context (and ANTLR's caches) and
  # LibTorch's allocator caches grow, which makes libFuzzer run
  # LeakSanitizer after most inputs and halves the speed; a one-shot
  # program's leaks are not what this hunts.
  t2=$(date +%s)
  rc=0
  "$BUILD/bin/cac-fuzz-$t" "${opts[@]}" "${budget[@]}" -detect_leaks=0 \
    -print_final_stats=1 -artifact_prefix="$BUILD/crashes/$t-" \
    "$corpus" "$seeds" > "$log" 2>&1 || rc=$?
  t3=$(date +%s)
  grep -E '^(#[0-9]+[[:space:]]+(INITED|DONE)|stat::)' "$log" || true
  if [ "$rc" != 0 ] || [ "$(failures "$t")" != "$crashes_before" ]; then
    echo "cac fuzz: $t FAILED (exit status $rc) after $((t3 - t2)) s; the end of $log:"
    tail -n 80 "$log"
    for f in "$BUILD"/crashes/"$t"-{crash,timeout,oom,leak}-*; do
      [ -f "$f" ] || continue
      echo "--- $f ($(wc -c < "$f") bytes); reproduce with $BUILD/bin/cac-fuzz-$t $f"
      head -c 2048 "$f" | od -c | head -n 40
    done
    return 1
  fi
  echo "cac fuzz: $t: no crash in $((t3 - t2)) s; corpus $(ls "$corpus" | wc -l) inputs"
}

# In CI the front end's budget is wall time on one core; the readers' (a
# number of inputs each) run one after another on the other core meanwhile,
# each target's report printed whole when it ends.
status=0
mkdir -p "$BUILD/crashes"
frontend_pid=
if [ "$CI" = 1 ] && [ "$JOBS" -gt 1 ] && [ ${#TARGETS[@]} -gt 1 ] &&
  [[ " ${TARGETS[*]} " == *" frontend "* ]]; then
  fuzz_one frontend > "$BUILD/fuzz-frontend.report" 2>&1 &
  frontend_pid=$!
fi
for t in "${TARGETS[@]}"; do
  if [ -n "$frontend_pid" ] && [ "$t" = frontend ]; then continue; fi
  fuzz_one "$t" || status=1
done
if [ -n "$frontend_pid" ]; then
  wait "$frontend_pid" || status=1
  cat "$BUILD/fuzz-frontend.report"
fi
exit "$status"
