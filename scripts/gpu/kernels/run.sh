#!/bin/bash
# On the GPU machine, from the repository root, with .gpu-deps/ from stage.sh:
# builds cac_runtime_kernels against the CUDA LibTorch of `python3` and runs
# its tests, CUDA ones included (arguments go to the test binary). Logs go to
# $OUT (or /tmp) when set.
#   run.sh --bench [ARGS]   instead builds bench/gpu/cac-bench-gpu and runs it
#                           on the staged .gpu-deps/bench-bundles (ARGS go to
#                           it, e.g. --shapes 4096x4096 --iters 50)
#   BUILD_ONLY=1 run.sh     builds both and runs nothing
#   CONFIGURE_ONLY=1 run.sh configures the build and checks that ninja knows
#                           how to make both (every source present), builds
#                           nothing (scripts/test.sh, where the main build
#                           already compiles and tests the same sources)
set -uo pipefail
bench=0
if [ "${1:-}" = --bench ]; then
  bench=1
  shift
fi
out=${OUT:-/tmp}
py=$(command -v python3)
# TORCH_PREFIX (a LibTorch's CMake prefix, empty for a system one) and
# TORCH_LIB override what the Python torch says (a dry run of this build on a
# machine without it: TORCH_PREFIX= TORCH_LIB=/usr/lib/x86_64-linux-gnu).
prefix=${TORCH_PREFIX-$($py -c "import torch; print(torch.utils.cmake_prefix_path)")}
torchlib=${TORCH_LIB-$(dirname "$($py -c "import torch; print(torch.__file__)")")/lib}
export PATH=/usr/local/cuda/bin:$PATH
build=${BUILD:-/tmp/cac-kernels-gpu}
bundles=""
[ -d .gpu-deps/stdlib-bundles ] && bundles=$PWD/.gpu-deps/stdlib-bundles
cmake -S scripts/gpu/kernels -B "$build" -G Ninja \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCAC_GPU_DEPS="$PWD/.gpu-deps" \
  -DCAC_TEST_STDLIB_BUNDLES="$bundles" \
  ${prefix:+-DCMAKE_PREFIX_PATH="$prefix"} -DCMAKE_CUDA_COMPILER=/usr/local/cuda/bin/nvcc \
  >"$out/configure.log" 2>&1 || { tail -60 "$out/configure.log"; exit 1; }
grep "cac_runtime_kernels" "$out/configure.log"
if [ -n "${CONFIGURE_ONLY:-}" ]; then
  ninja -n -C "$build" cac-runtime-kernels-tests cac-bench-gpu >"$out/build.log" 2>&1 ||
    { tail -20 "$out/build.log"; exit 1; }
  exit 0
fi
target=cac-runtime-kernels-tests
[ $bench = 1 ] && target=cac-bench-gpu
[ -n "${BUILD_ONLY:-}" ] && target="cac-runtime-kernels-tests cac-bench-gpu"
ninja -k 0 -C "$build" $target >"$out/build.log" 2>&1 ||
  { grep -A12 "error" "$out/build.log" | head -80; exit 1; }
[ -n "${BUILD_ONLY:-}" ] && exit 0
export LD_LIBRARY_PATH=$torchlib:${LD_LIBRARY_PATH:-}
if [ $bench = 1 ]; then
  nvidia-smi --query-gpu=name,memory.total,clocks.max.memory --format=csv,noheader || true
  "$build/bench-gpu/cac-bench-gpu" --bundles "$PWD/.gpu-deps/bench-bundles" "$@" |
    tee "$out/bench-gpu.md"
  exit "${PIPESTATUS[0]}"
fi
"$build/kernels-tests/cac-runtime-kernels-tests" "$@" >"$out/tests.log" 2>&1
rc=$?
grep -v '^\[       OK\|^\[ RUN' "$out/tests.log" | tail -40
exit $rc
