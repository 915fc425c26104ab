#!/usr/bin/env bash
# Builds cac-fuzz-frontend (clang, libFuzzer, ASan + UBSan) in build-fuzz/ and
# fuzzes the front end for SECONDS (default 120), single process, from the
# seed corpus: stdlib/, examples/estimators/, test/DSL/, test/Inputs/imports/,
# test/Unit/Eager/inputs/ and test/fuzz/seeds/ (README.md).
#
#   test/fuzz/run.sh [SECONDS]      (0: build only)
#
# Exit status 0: no crash. 1: a crash, sanitizer report, timeout (hang) or
# out-of-memory; the input is kept in build-fuzz/crashes/ and printed.
# 2: the build failed. Environment: CAC_FUZZ_BUILD_DIR (build-fuzz),
# CAC_FUZZ_JOBS (2), CAC_FUZZ_STAGE (mlir|cpu|llvm, see FuzzFrontend.cpp).
set -euo pipefail
cd "$(dirname "$0")/../.."
DURATION=${1:-120}
BUILD=${CAC_FUZZ_BUILD_DIR:-build-fuzz}
JOBS=${CAC_FUZZ_JOBS:-2}
CLANG=${CAC_FUZZ_CC:-clang-19}
CLANGXX=${CAC_FUZZ_CXX:-clang++-19}
case "$DURATION" in ''|*[!0-9]*) echo "usage: $0 [SECONDS]" >&2; exit 2;; esac

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
cmake --build "$BUILD" --target cac-fuzz-frontend -j"$JOBS" || exit 2
t1=$(date +%s)
echo "cac fuzz: built $BUILD/bin/cac-fuzz-frontend in $((t1 - t0)) s"
if [ "$DURATION" = 0 ]; then exit 0; fi  # build only (libFuzzer reads 0 as no limit)

# Seeds are copied afresh (only .cac sources and the fuzz-*.test regression
# inputs, which are cac files whose RUN lines are comments); the corpus the
# fuzzer grows stays in $BUILD/corpus between local runs. test/fuzz/seeds/
# holds seeds whose imports resolve from the repository root, where the
# fuzzer runs: an input is the buffer "fuzz.cac", whose imports are relative
# to the working directory.
rm -rf "$BUILD/seeds"
mkdir -p "$BUILD/seeds" "$BUILD/corpus" "$BUILD/crashes"
for f in stdlib/*.cac examples/estimators/*.cac test/DSL/*.cac \
  test/Inputs/imports/*.cac test/Unit/Eager/inputs/*.cac test/fuzz/seeds/*.cac \
  test/DSL/fuzz-*.test; do
  [ -f "$f" ] && cp "$f" "$BUILD/seeds/$(echo "$f" | tr / _)"
done
crashes_before=$(ls "$BUILD/crashes" | wc -l)

symbolizer=/usr/lib/llvm-19/bin/llvm-symbolizer
if [ -x "$symbolizer" ]; then export ASAN_SYMBOLIZER_PATH=$symbolizer; fi
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
# Leak checks are off: the context the target keeps between inputs (and
# ANTLR's caches) grow, which makes libFuzzer run LeakSanitizer after most
# inputs and halves the speed; a one-shot compiler's leaks are not its bugs.
log="$BUILD/fuzz.log"
echo "cac fuzz: fuzzing for $DURATION s (log: $log)"
status=0
"$BUILD/bin/cac-fuzz-frontend" -dict=test/fuzz/cac.dict \
  -max_total_time="$DURATION" -max_len=4096 -timeout=60 -rss_limit_mb=4096 \
  -detect_leaks=0 \
  -print_final_stats=1 -artifact_prefix="$BUILD/crashes/" \
  "$BUILD/corpus" "$BUILD/seeds" > "$log" 2>&1 || status=$?
t2=$(date +%s)

grep -E '^(#[0-9]+[[:space:]]+(INITED|DONE)|stat::)' "$log" || true
if [ "$status" != 0 ] || [ "$(ls "$BUILD/crashes" | wc -l)" != "$crashes_before" ]; then
  echo "cac fuzz: FAILED (exit status $status) after $((t2 - t1)) s; the end of $log:"
  tail -n 80 "$log"
  for f in "$BUILD"/crashes/*; do
    [ -f "$f" ] || continue
    echo "--- $f ($(wc -c < "$f") bytes); reproduce with $BUILD/bin/cac-fuzz-frontend $f"
    head -c 2048 "$f" | od -c | head -n 40
  done
  exit 1
fi
echo "cac fuzz: no crash in $((t2 - t1)) s; corpus $(ls "$BUILD/corpus" | wc -l) inputs"
