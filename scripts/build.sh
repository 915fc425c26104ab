#!/usr/bin/env bash
# Configures and builds cac into build/ (Ninja + ccache). CAC_ENABLE_TESTS=OFF
# skips the test targets.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${CAC_BUILD_DIR:-build}
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache \
  -DCAC_ENABLE_TESTS="${CAC_ENABLE_TESTS:-ON}" \
  -DLLVM_EXTERNAL_LIT=/usr/lib/llvm-19/build/utils/lit/lit.py > "$BUILD.configure.log" 2>&1 \
  || { cat "$BUILD.configure.log"; exit 1; }
cmake --build "$BUILD" -j"$(nproc)"
