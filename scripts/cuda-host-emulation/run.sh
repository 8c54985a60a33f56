#!/usr/bin/env bash
# Host emulation of the scatter and spatial kernel families (no GPU needed):
#   scripts/cuda-host-emulation/run.sh [build-dir]   (default build; needs libkiln.so built)
# Generates the kernels' CUDA source, compiles each with g++ against shim.h, runs harness.cpp.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=$(cd "${1:-$root/build}" && pwd)
here=$root/scripts/cuda-host-emulation
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cuda=$root/src/backends/cuda
awk '/^namespace {/{f=1;next} /^DType compute_dtype/{f=0} f' "$cuda/cuda_spatial.cpp" > "$work/helpers.inc"
g++ -std=c++20 -O1 -I"$root/src" -I"$root/include" "$here/gen.cpp" "$cuda/scatter_source.cpp" \
    "$cuda/spatial_source.cpp" "$cuda/kernel_source.cpp" -L"$build" -lkiln -Wl,-rpath,"$build" -o "$work/gen"
"$work/gen" "$work"
ls "$work"/k_*.cpp | xargs -P "$(nproc)" -I{} sh -c \
    'g++ -std=c++20 -O1 -shared -fPIC -w -include "$0/shim.h" "$1" -o "${1%.cpp}.so"' "$here" {}
g++ -std=c++20 -O1 -I"$root/src" -I"$root/include" -I"$work" "$here/harness.cpp" -L"$build" -lkiln -ldl \
    -Wl,-rpath,"$build" -o "$work/harness"
EMU_DIR=$work "$work/harness"
