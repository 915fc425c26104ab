#!/usr/bin/env bash
# Installs everything cac needs on a fresh Debian 12 machine (Debian packages only).
set -euo pipefail
SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO=sudo; fi
PKGS=(
  cmake ninja-build ccache g++ python3
  llvm-19-dev libmlir-19-dev mlir-19-tools llvm-19-tools
  antlr4 libantlr4-runtime-dev default-jre-headless
  libfmt-dev nlohmann-json3-dev libgtest-dev
  libtorch-dev libgloo-dev libopenblas0-pthread libpng-dev
  clang-19 libclang-rt-19-dev
  python3-torch python3-numpy python3-pytest pybind11-dev
)
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "cac setup: installing ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
