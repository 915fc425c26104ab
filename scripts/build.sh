#!/usr/bin/env bash
# Configures and builds cac into build/ (Ninja + ccache).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${CAC_BUILD_DIR:-build}
if [ ! -f "$BUILD/build.ninja" ]; then
  cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache
fi
cmake --build "$BUILD" -j"$(nproc)"
