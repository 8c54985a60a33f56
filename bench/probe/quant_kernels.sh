#!/usr/bin/env bash
# Nsight Compute's view of the quantized product's kernels (GPU machine):
#   bench/probe/quant_kernels.sh BUILD_DIR KIND N K ROWS...
# for each ROWS, the third call's kernels (the first compiles, the second warms): time, DRAM
# throughput, achieved occupancy, and the warps' stall reasons.
set -euo pipefail
build=$1 kind=$2 n=$3 k=$4
shift 4
g++ -std=c++20 -O1 bench/probe/quant_probe.cpp -Iinclude -L"$build" -lkiln \
  -Wl,-rpath,"$PWD/$build" -o /tmp/quant_probe
for rows in "$@"; do
  echo "== $kind ${n}x$k rows $rows"
  ncu --kernel-name regex:kiln_quant --launch-skip 2 --launch-count 2 \
    --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats \
    --section MemoryWorkloadAnalysis /tmp/quant_probe "$kind" "$n" "$k" "$rows" 3 2>&1 |
    grep -E 'kiln_quant|Duration|DRAM Throughput|Memory Throughput|Achieved Occupancy|Theoretical Occupancy|Registers Per|Shared Memory Config|Grid Size|Block Size|Waves Per SM|Stall|L1/TEX Hit|L2 Hit|Mem Busy|Max Bandwidth|Compute \(SM\)|Block Limit|Dynamic Shared|Issue Slots|Warp Cycles Per Issued' | head -60
  # Where the product's warps wait: cycles stalled per issued instruction, by reason (the larger).
  echo "  stalls of kiln_quant_product / kiln_quant_matvec (cycles per issued instruction):"
  ncu --kernel-name regex:'kiln_quant_(product|matvec)' --launch-skip 1 --launch-count 1 \
    --metrics regex:'smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio' \
    /tmp/quant_probe "$kind" "$n" "$k" "$rows" 3 2>&1 |
    awk '/stalled/ && $NF + 0 >= 0.05 {sub("smsp__average_warps_issue_stalled_", "", $1);
         sub("_per_issue_active.ratio", "", $1); printf "    %-28s %s\n", $1, $NF}' |
    sort -k2 -rn | head -12
done
