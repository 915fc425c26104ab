#!/usr/bin/env bash
# Checks that the code cac generates for every stdlib method is the code
# recorded in test/codegen/stdlib.sha256: the CPU's LLVM IR (compiled for
# x86-64-v4, AVX-512 in 256-bit vectors, whatever this machine's CPU), the GPU's PTX
# and the gpu-sim lowering (LLVM dialect), under the default options and the
# variants that take other paths through the lowering. A refactoring must
# leave every line of that file as it is; a change of the generated code
# updates it in the same commit (--update), which the diff then shows.
#
#   scripts/codegen-identity.sh [--update] [--dump DIR] [BUILD]
#
# --dump DIR also writes every output to DIR (to diff two builds' outputs);
# BUILD is the build folder (default: build).
set -euo pipefail
cd "$(dirname "$0")/.."
update=0
dump=""
build=build
while [ $# -gt 0 ]; do
  case "$1" in
  --update) update=1 ;;
  --dump) dump=$2; shift ;;
  -*) echo "codegen-identity: unknown option $1" >&2; exit 2 ;;
  *) build=$1 ;;
  esac
  shift
done
cac=$build/bin/cac
opt=$build/bin/cac-opt
for tool in "$cac" "$opt"; do
  [ -x "$tool" ] || { echo "codegen-identity: $tool is not built" >&2; exit 2; }
done
expected=test/codegen/stdlib.sha256
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
[ -n "$dump" ] && mkdir -p "$dump"

# name|emit|flags: the variants; each takes a path of the lowering that the
# defaults do not (f64 arithmetic, group kernels of their own, one thread per
# sequence, other block shapes and layouts, no prefetch, a register bound,
# sequences split over several blocks).
variants=(
  "default|llvm ptx sim|"
  "f64|llvm ptx|--f64"
  "nofuse|llvm ptx|--fuse-groups=false"
  "thread|ptx|--seq-block=0"
  "b64i2|ptx|--seq-block=64 --seq-items=2"
  "striped|ptx|--seq-layout=striped"
  "blocked|ptx|--seq-layout=blocked"
  "nopf|ptx|--seq-prefetch=false"
  "pfin|ptx|--seq-prefetch-written=false"
  "minb2|ptx|--seq-min-blocks=2"
  "split|llvm ptx sim|--seq-split=1024"
)

actual=$work/actual.sha256
: > "$actual"
status=0
for file in stdlib/*.cac; do
  method=$(basename "$file" .cac)
  for v in "${variants[@]}"; do
    IFS='|' read -r name emits flags <<< "$v"
    for emit in $emits; do
      out=$work/$method.$name.$emit
      # shellcheck disable=SC2086
      if [ "$emit" = sim ]; then
        # Through a pipe: the manifest records the file cac-opt read.
        "$cac" compile "$file" --emit=kernels $flags |
          "$opt" --cac-to-gpu-sim -o "$out"
      elif [ "$emit" = llvm ]; then
        "$cac" compile "$file" --emit=llvm --cpu=x86-64-v4 $flags -o "$out"
      else
        "$cac" compile "$file" --emit="$emit" $flags -o "$out"
      fi || { echo "codegen-identity: $method $name $emit failed" >&2; status=1; continue; }
      sum=$(sha256sum "$out" | cut -d' ' -f1)
      echo "$sum  $method.$name.$emit" >> "$actual"
      [ -n "$dump" ] && cp "$out" "$dump/"
    done
  done
done
[ $status = 0 ] || exit 1

if [ $update = 1 ]; then
  mkdir -p "$(dirname "$expected")"
  cp "$actual" "$expected"
  echo "codegen-identity: wrote $expected ($(wc -l < "$expected") outputs)"
  exit 0
fi
if [ ! -f "$expected" ]; then
  echo "codegen-identity: $expected is missing (run with --update)" >&2
  exit 1
fi
if ! diff -u "$expected" "$actual" > "$work/diff"; then
  echo "codegen-identity: generated code differs from $expected:" >&2
  grep '^[-+][0-9a-f]' "$work/diff" | sed 's/^/  /' >&2
  exit 1
fi
echo "codegen-identity: $(wc -l < "$actual") outputs identical to $expected"
