#!/bin/bash
# On the GPU machine, from the repository root, with .gpu-deps/ from stage.sh:
# builds cac_runtime_kernels against the CUDA LibTorch of `python3` and runs
# its tests, CUDA ones included. Logs go to $OUT (or /tmp) when set.
set -uo pipefail
out=${OUT:-/tmp}
py=$(command -v python3)
prefix=$($py -c "import torch; print(torch.utils.cmake_prefix_path)")
torchlib=$(dirname "$($py -c "import torch; print(torch.__file__)")")/lib
export PATH=/usr/local/cuda/bin:$PATH
build=${BUILD:-/tmp/cac-kernels-gpu}
bundles=""
[ -d .gpu-deps/stdlib-bundles ] && bundles=$PWD/.gpu-deps/stdlib-bundles
cmake -S test/Unit/Kernels/gpu-check -B "$build" -G Ninja \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCAC_GPU_DEPS="$PWD/.gpu-deps" \
  -DCAC_TEST_STDLIB_BUNDLES="$bundles" \
  -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_CUDA_COMPILER=/usr/local/cuda/bin/nvcc \
  >"$out/configure.log" 2>&1 || { tail -60 "$out/configure.log"; exit 1; }
grep "cac_runtime_kernels" "$out/configure.log"
ninja -C "$build" cac-runtime-kernels-tests >"$out/build.log" 2>&1 ||
  { grep -A12 "error" "$out/build.log" | head -80; exit 1; }
export LD_LIBRARY_PATH=$torchlib:${LD_LIBRARY_PATH:-}
"$build/kernels-tests/cac-runtime-kernels-tests" "$@" >"$out/tests.log" 2>&1
rc=$?
grep -v '^\[       OK\|^\[ RUN' "$out/tests.log" | tail -40
exit $rc
