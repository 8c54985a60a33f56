#!/usr/bin/env bash
# The matrix-vector kernel's shapes of work on the GPU machine, in one call: builds what
# scripts/gpu-check gpu-quant builds (same directory), then bench/gpu_quant_bench's matvec rows
# under each setting of the measuring knobs (quant_source.cpp, cuda_quant_product.cpp:
# KILN_QUANT_MV_PIECES, KILN_QUANT_MV_WAVES, KILN_QUANT_MV_BLOCKS), then Nsight Compute over the
# default's Q4_0 and Q8_0 kernels, then the quantized GPU tests (quick set).
#   bench/probe/matvec_sweep.sh "SETTING;SETTING..." [ROWS] [KINDS]   (a SETTING: env
#   assignments; ROWS as gpu_quant_bench's --rows for the first setting, 1 for the others; KINDS
#   the kinds Nsight Compute looks at, default "q4_0 q8_0"; NCU=0 leaves it out; TEST_ENV: env
#   assignments for the tests)
set -uo pipefail
cd "$(dirname "$0")/../.."
[ -d .gpu-carry ] && export CMAKE_PREFIX_PATH=$PWD/.gpu-carry LD_LIBRARY_PATH=$PWD/.gpu-carry/lib
build=build-gpu out=${OUT:-/tmp/matvec-sweep}
mkdir -p "$out"
export XDG_CACHE_HOME=$PWD/$build/xdg-cache
start=$SECONDS
cmake -S . -B $build -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 \
  -DKILN_BUILD_BENCH=ON -DKILN_REMOTE=OFF >"$out/configure.log" 2>&1 || { tail -30 "$out/configure.log"; exit 1; }
cmake --build $build -j 16 --target kiln_cuda kiln_gpu_tests gpu_quant_bench >"$out/build.log" 2>&1 ||
  { grep -B2 -A10 'error' "$out/build.log" | head -60; exit 1; }
echo "build $((SECONDS - start)) s"
# .gpu-carry/baseline.tar.gz (git archive of the commit to compare with, carried with the call):
# built beside and run first, so the comparison is on the same card in the same call.
if [ -f .gpu-carry/baseline.tar.gz ]; then
  base=/tmp/matvec-baseline
  rm -rf $base && mkdir -p $base && tar -xzf .gpu-carry/baseline.tar.gz -C $base
  (cd $base && cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 \
     -DKILN_BUILD_BENCH=ON -DKILN_REMOTE=OFF >/dev/null 2>&1 &&
   cmake --build build -j 16 --target kiln_cuda gpu_quant_bench >/dev/null 2>&1) || echo "baseline build failed"
  echo "== baseline (rows ${2:-1}), built $((SECONDS - start)) s"
  XDG_CACHE_HOME=$base/build/xdg-cache $base/build/bench/gpu_quant_bench --repeats 5 --rows "${2:-1}" 2>&1 |
    grep -E 'memcpy|matvec|batch|bf16|differs|error'
fi
IFS=';' read -ra settings <<<"${1:-}"
[ ${#settings[@]} -eq 0 ] && settings=("")
rows=${2:-1}
for setting in "${settings[@]}"; do
  echo "== setting: ${setting:-default} (rows $rows)"
  env $setting ./$build/bench/gpu_quant_bench --repeats 5 --rows "$rows" 2>&1 | grep -E 'memcpy|matvec|batch|bf16|differs|error'
  rows=1
done
if [ "${NCU:-1}" = 1 ] && command -v ncu >/dev/null; then
  g++ -std=c++20 -O1 bench/probe/quant_probe.cpp -Iinclude -L$build -lkiln -Wl,-rpath,"$PWD/$build" -o /tmp/quant_probe
  for kind in ${3:-q4_0 q8_0}; do
    echo "== ncu $kind 4096x14336 rows 1"
    timeout 120 ncu --kernel-name regex:kiln_quant --launch-skip 2 --launch-count 1 \
      --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats \
      --section ComputeWorkloadAnalysis --section InstructionStats --section SchedulerStats \
      --section MemoryWorkloadAnalysis /tmp/quant_probe $kind 4096 14336 1 3 2>&1 |
      grep -E 'Duration|DRAM Throughput|Compute \(SM\)|Achieved Occupancy|Registers Per|Grid Size|Waves Per SM|Stall|Issue Slots Busy|Issued Ipc|Executed Ipc|No Eligible|Active Warps Per|Eligible Warps|Executed Instructions  |Pipe|L1/TEX Hit|L2 Hit|Mem Busy|Max Bandwidth|Block Limit|Dynamic Shared|One or More' | head -50
  done
fi
echo "== tests ${TEST_ENV:-}"
env ${TEST_ENV:-} ./$build/tests/gpu/kiln_gpu_tests --gtest_filter='GpuQuant*:GpuCodegen.Quant*:-GpuQuant.ProductsMatchFloat64OverSchemesDTypesAndBatches' 2>&1 |
  grep -E '^\[  (FAILED|PASSED)  \]|tests ran|Failure' | head -30
echo "total $((SECONDS - start)) s"
