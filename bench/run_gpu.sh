#!/usr/bin/env bash
# Runs gpu_bench and the PyTorch GPU peer in one invocation on the same device, then prints the
# table (workload, kiln median, torch median, ratio, floor).
#   bench/run_gpu.sh [BUILD_DIR] [OUT_DIR]       (defaults: build, BUILD_DIR/bench-results)
# Environment: KILN_BENCH_REPEATS (default 20), KILN_PEER_PYTHON (an interpreter with torch and
# CUDA; default python3), KILN_BENCH_FILTER (a --benchmark_filter regex).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
out=${2:-$build/bench-results}
repeats=${KILN_BENCH_REPEATS:-20}
filter=${KILN_BENCH_FILTER:-.}
mkdir -p "$out"
binary="$build/bench/gpu_bench"
if [ ! -x "$binary" ]; then
  echo "run_gpu: $binary not found (configure with KILN_CUDA and KILN_BUILD_BENCH on)" >&2
  exit 1
fi
"$binary" --benchmark_filter="$filter" --benchmark_repetitions="$repeats" \
  --benchmark_display_aggregates_only=true \
  --benchmark_out="$out/gpu_bench.json" --benchmark_out_format=json
python=${KILN_PEER_PYTHON:-python3}
peer=""
if "$python" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; then
  "$python" bench/peer_torch_gpu.py --repeats "$repeats" --out "$out/torch_gpu.json" > /dev/null
  peer="$out/torch_gpu.json"
else
  echo "run_gpu: $python has no torch with CUDA; no peer figures" >&2
fi
python3 bench/report_gpu.py "$out/gpu_bench.json" $peer --json "$out/gpu_table.json"
