#!/usr/bin/env bash
# Why one matmul row differs between kiln and torch, in one call on the GPU machine:
#  1. both sides timed alternately, ROUNDS times each (neither always runs on the hotter GPU),
#     with the GPU's clock, power and temperature before each run;
#  2. cuBLASLt's heuristic candidates for the row, each timed (bench/probe/lt_algos.cu);
#  3. the kernel each side launches, by name and duration (ncu, --clock-control none), and the
#     algorithm cuBLASLt's log records for each side.
#   bench/probe/matmul.sh BUILD_DIR [KIND N ROUNDS]   (KIND 0 bf16, 1 f16, 2 f32, 3 tf32)
# Environment: KILN_PEER_PYTHON (an interpreter with torch), OUT (where logs go).
set -uo pipefail
cd "$(dirname "$0")/../.."
build=${1:?usage: matmul.sh BUILD_DIR [KIND N ROUNDS]}
kind=${2:-3}
n=${3:-8192}
rounds=${4:-3}
python=${KILN_PEER_PYTHON:-python3}
out=${OUT:-/tmp/kiln-probe}
mkdir -p "$out"
row="matmul/$kind/$n"
filter="^$row(/|\$)"  # gpu_bench appends /iterations:20/manual_time
bench="$build/bench/gpu_bench"
gpu_state() {
  nvidia-smi --id=0 --query-gpu=clocks.sm,power.draw,temperature.gpu --format=csv,noheader 2>/dev/null
}
echo "== alternating runs of $row (median µs)"
for r in $(seq "$rounds"); do
  before=$(gpu_state)
  "$bench" --benchmark_filter="$filter" --benchmark_repetitions=10 \
    --benchmark_out="$out/kiln_$r.json" --benchmark_out_format=json >/dev/null 2>&1
  mid=$(gpu_state)
  "$python" bench/peer_torch_gpu.py --repeats 10 --filter "$filter" --out "$out/torch_$r.json" \
    >/dev/null 2>&1
  echo "round $r: kiln $(bench/probe/median_us.py "$out/kiln_$r.json") (GPU before: $before)," \
       "torch $(bench/probe/median_us.py "$out/torch_$r.json" "$row") (GPU before: $mid)"
done

echo "== cuBLASLt heuristic candidates, each timed"
nvcc -O2 -std=c++17 -arch=sm_90 bench/probe/lt_algos.cu -lcublasLt -o "$out/lt_algos" &&
  "$out/lt_algos" "$kind" "$n" 32

echo "== kernels (ncu)"
metrics=gpu__time_duration.sum,launch__grid_size,launch__block_size,launch__cluster_dim_x,launch__cluster_dim_y,launch__registers_per_thread,sm__cycles_elapsed.avg.per_second
kernels='regex:gemm|nvjet|xmma|cutlass|sm90'
ncu --clock-control none --launch-skip 2 --launch-count 1 -k "$kernels" --metrics "$metrics" \
  "$bench" --benchmark_filter="$filter" --benchmark_repetitions=1 >"$out/ncu_kiln.txt" 2>&1
grep -v '^==PROF==' "$out/ncu_kiln.txt" | grep -A14 -m1 -E 'gemm|nvjet|xmma|cutlass|sm90' | sed 's/^/kiln  /'
ncu --clock-control none --launch-skip 2 --launch-count 1 -k "$kernels" --metrics "$metrics" \
  "$python" bench/peer_torch_gpu.py --repeats 1 --filter "$filter" >"$out/ncu_torch.txt" 2>&1
grep -v '^==PROF==' "$out/ncu_torch.txt" | grep -A14 -m1 -E 'gemm|nvjet|xmma|cutlass|sm90' | sed 's/^/torch /'

echo "== cuBLASLt's log of each side's matmul call"
CUBLASLT_LOG_LEVEL=2 CUBLASLT_LOG_FILE="$out/lt_kiln.log" "$bench" --benchmark_filter="$filter" \
  --benchmark_repetitions=1 >/dev/null 2>&1
grep -m1 'Matmul\]' "$out/lt_kiln.log" | cut -c1-1200 | sed 's/^/kiln  /'
CUBLASLT_LOG_LEVEL=2 CUBLASLT_LOG_FILE="$out/lt_torch.log" CUBLAS_LOGINFO_DBG=1 \
  CUBLAS_LOGDEST_DBG="$out/cublas_torch.log" \
  "$python" bench/peer_torch_gpu.py --repeats 1 --filter "$filter" >/dev/null 2>&1
grep -m1 'Matmul\]' "$out/lt_torch.log" | cut -c1-1200 | sed 's/^/torch /'
grep -m1 -i 'gemm' "$out/cublas_torch.log" | cut -c1-600 | sed 's/^/torch cublas /'
exit 0
