#!/usr/bin/env bash
# The CUDA plugin's host path without a GPU: bench/probe/fused_host.cpp on cuda:0 over the fake
# driver (tests/gpu/fake_driver: host memory, launches that do nothing, NVRTC compiling for real),
# eager and fused, ROUNDS times interleaved. Results are not computed, so only times mean anything.
#   bench/probe/fake_driver_host.sh BUILD_DIR [ROUNDS]   (libkiln, kiln_cuda and kiln_fake_cuda
#   built in BUILD_DIR); for a profile: perf record --call-graph dwarf on the fused run, or (where
#   there is no perf, as on the GPU machine) bench/probe/sampler.cpp. KILN_FAKE_CUDA_LAUNCH_US=N
#   makes each launch cost N microseconds of host time, as the real driver's do.
set -euo pipefail
cd "$(dirname "$0")/../.."
build=$(cd "${1:?usage: fake_driver_host.sh BUILD_DIR [ROUNDS]}" && pwd)
rounds=${2:-3}
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
g++ -std=c++20 -O2 -g -Iinclude bench/probe/fused_host.cpp -L"$build" -lkiln \
  -Wl,-rpath,"$build" -o "$scratch/fused_host"
export LD_LIBRARY_PATH=$build/tests/gpu/fake_driver XDG_CACHE_HOME=$scratch/cache
for r in $(seq "$rounds"); do
  for fused in 0 1; do echo "round $r: $("$scratch/fused_host" "$fused" 40000)"; done
done
