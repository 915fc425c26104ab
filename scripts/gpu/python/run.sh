#!/bin/bash
# On the GPU machine, from the repository root, with .gpu-deps/ from
# stage.sh (nlohmann-json and the stdlib's bundles): builds the Python
# extension _cac against the CUDA torch of `python3`, puts the package
# beside it and runs scripts/gpu/python/check.py (CUDA tensors against CPU
# tensors through the same bundles, the current stream, no host sync on the
# packed path). With --baselines it then times the package against verl's
# own forms on the GPU (bench/python/baselines.py; shapes in
# BASELINE_SHAPES) into $OUT/baselines-cuda.md. Logs go to $OUT (or /tmp).
set -uo pipefail
out=${OUT:-/tmp}
py=${PYTHON:-$(command -v python3)}
# TORCH_PREFIX: a LibTorch's CMake prefix (empty for a system one, as in a
# dry run of this build with Debian's torch: TORCH_PREFIX= PYTHON=/usr/bin/python3).
prefix=${TORCH_PREFIX-$($py -c "import torch; print(torch.utils.cmake_prefix_path)")}
inc=$($py -c "import sysconfig; print(sysconfig.get_paths()['include'])")
suffix=$($py -c "import sysconfig; print(sysconfig.get_config_var('EXT_SUFFIX'))")
export PATH=/usr/local/cuda/bin:$PATH
build=${BUILD:-/tmp/cac-python-gpu}
cmake -S scripts/gpu/python -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCAC_GPU_DEPS="$PWD/.gpu-deps" -DCAC_PYTHON_INCLUDE="$inc" \
  -DCAC_PYTHON_SUFFIX="$suffix" ${prefix:+-DCMAKE_PREFIX_PATH="$prefix"} \
  >"$out/python-configure.log" 2>&1 || { tail -60 "$out/python-configure.log"; exit 1; }
ninja -C "$build" _cac >"$out/python-build.log" 2>&1 ||
  { grep -A12 "error" "$out/python-build.log" | head -80; exit 1; }
mkdir -p "$build/python/cac/methods"
cp python/cac/*.py "$build/python/cac/"
cp python/cac/methods/*.cac "$build/python/cac/methods/"
PYTHONPATH="$build/python" "$py" scripts/gpu/python/check.py \
  --bundles "$PWD/.gpu-deps/stdlib-bundles" 2>&1 | tee "$out/python-check.log"
status=${PIPESTATUS[0]}
if [ "${1:-}" = --baselines ]; then
  PYTHONPATH="$build/python" "$py" bench/python/baselines.py --device "${BASELINE_DEVICE:-cuda}" \
    --bundles "$PWD/.gpu-deps/stdlib-bundles:$PWD/.gpu-deps/python-bundles" \
    --shapes "${BASELINE_SHAPES:-4096x4096,1024x4096,256x4096}" 2>&1 |
    tee "$out/baselines-cuda.md"
  [ "${PIPESTATUS[0]}" = 0 ] || status=1
fi
exit "$status"
