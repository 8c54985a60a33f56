#!/usr/bin/env bash
# chain8 4096^2 eager with the wide-load kernel's alternating directions off (KILN_CUDA_ALTERNATE=0)
# and on, interleaved ROUNDS times, and torch eager between rounds: what walking successive
# launches in opposite directions (src/backends/cuda/elementwise.cpp) gains from L2.
#   bench/probe/chain8_directions.sh BUILD_DIR [ROUNDS]   (gpu_ops_bench built in BUILD_DIR)
# Environment: KILN_PEER_PYTHON (an interpreter with torch).
set -uo pipefail
cd "$(dirname "$0")/../.."
build=${1:?usage: chain8_directions.sh BUILD_DIR [ROUNDS]}
rounds=${2:-3}
python=${KILN_PEER_PYTHON:-python3}
scratch=$(mktemp -d)
for r in $(seq "$rounds"); do
  for alternate in 0 1; do
    KILN_CUDA_ALTERNATE=$alternate "$build/bench/gpu_ops_bench" --benchmark_filter='^chain8' \
      --benchmark_repetitions=10 --benchmark_out="$scratch/kiln.json" --benchmark_out_format=json \
      >/dev/null 2>&1
    echo "round $r: kiln, alternate=$alternate: $(bench/probe/median_us.py "$scratch/kiln.json") us"
  done
  "$python" bench/peer_torch_gpu.py --repeats 10 --filter '^chain8' --out "$scratch/torch.json" \
    >/dev/null 2>&1 &&
    echo "round $r: torch: $(bench/probe/median_us.py "$scratch/torch.json" chain8/4096) us"
done
rm -rf "$scratch"
