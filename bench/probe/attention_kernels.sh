#!/usr/bin/env bash
# Why flash attention runs below torch's on cuda:0 (GPU machine): Nsight Compute's throughput,
# occupancy and warp-stall sections, and each stall reason's cycles per issued instruction, for
# each kernel of one forward and backward of attention_fwd_bwd/bf16/4096 (gpu_ops_bench: bf16,
# 4 x 16 heads x 4096 x 128): the forward pass, the D pass (kiln_attention_delta), dk with dv
# (and dq, merged), or dq alone with KILN_ATTENTION_MERGED_DQ=0.
#   bench/probe/attention_kernels.sh BUILD_DIR [KERNEL_REGEX]
# KERNEL_REGEX defaults to the Hopper kernels' names and the D pass's; with
# KILN_ATTENTION_WGMMA=0 and 'kiln_attention' the mma.sync ones. Full report: $OUT (or /tmp)/
# ncu_attention.txt; the lines that say where the time goes are printed.
set -uo pipefail
build=${1:?usage: attention_kernels.sh BUILD_DIR [KERNEL_REGEX]}
kernels=${2:-kiln_attention_(wg|delta)}
out=${OUT:-/tmp}
# Past the first iteration (which compiles and warms up; at most five launches), six launches:
# the second iteration's and the start of the third.
ncu --clock-control none -k "regex:$kernels" --launch-skip 5 --launch-count 6 \
  --section SpeedOfLight --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis \
  --section Occupancy --section WarpStateStats --section LaunchStats \
  --metrics 'regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio' \
  "$build/bench/gpu_ops_bench" --benchmark_filter='^attention_fwd_bwd/bf16/4096/iter' \
  --benchmark_repetitions=1 >"$out/ncu_attention.txt" 2>&1
grep -E "^  kiln_attention|Duration|Compute \(SM\) Throughput|Memory Throughput|L2 Cache Throughput|Executed Ipc Active|Issue Slots Busy|Achieved Occupancy|Warp Cycles Per Issued|Registers Per|Shared Memory Configuration Size|stall|Stall" \
  "$out/ncu_attention.txt" | cut -c1-160 | head -90
