#!/usr/bin/env bash
# Host emulation of the reduction and softmax kernel families (no GPU needed):
#   scripts/cuda-host-emulation/run_reduce.sh [build-dir] [reduce|softmax|fused|random|strided|rows|epilogue|all]
# Builds reduce_harness.cpp against libkiln.so; it generates each kernel module it needs,
# compiles it with g++ against shim.h (blocks run as real threads) and compares with the CPU.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=$(cd "${1:-$root/build}" && pwd)
here=$root/scripts/cuda-host-emulation
work=$(mktemp -d)
trap '[ -n "${EMU_KEEP:-}" ] || rm -rf "$work"' EXIT
cuda=$root/src/backends/cuda
g++ -std=c++20 -O1 -DFMT_HEADER_ONLY=1 -I"$root/src" -I"$root/include" "$here/reduce_harness.cpp" \
    "$cuda/reduce_source.cpp" "$cuda/reduce_plan.cpp" "$cuda/softmax_source.cpp" "$cuda/softmax_plan.cpp" \
    "$cuda/kernel_source.cpp" "$cuda/fused_kernel_source.cpp" "$cuda/elementwise_source.cpp" \
    -L"$build" -lkiln -ldl -Wl,-rpath,"$build" -o "$work/harness"
EMU_DIR=$work EMU_SHIM=$here/shim.h "$work/harness" "${2:-all}"
