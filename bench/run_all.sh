#!/usr/bin/env bash
# Runs kiln's CPU and autodiff benchmarks and the PyTorch peer in one invocation, then prints the
# table (workload, kiln median, peer median, ratio, floor). About 4 minutes on 2 cores.
#   bench/run_all.sh [BUILD_DIR]        (default: build; ./run bench builds it first)
# Environment: KILN_BENCH_THREADS (default 2, used by kiln, OpenBLAS and torch alike),
# KILN_BENCH_REPEATS (default 15), KILN_BENCH_FILTER (a --benchmark_filter regex).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
threads=${KILN_BENCH_THREADS:-2}
repeats=${KILN_BENCH_REPEATS:-15}
filter=${KILN_BENCH_FILTER:-.}
out="$build/bench-results"
mkdir -p "$out"

binary="$build/bench/cpu_bench"
if [ ! -x "$binary" ]; then
  echo "run_all: $binary not found (configure with -DKILN_BUILD_BENCH=ON and libbenchmark-dev)" >&2
  exit 1
fi

export OMP_NUM_THREADS=$threads OPENBLAS_NUM_THREADS=$threads
"$binary" --benchmark_filter="$filter" --benchmark_repetitions="$repeats" \
  --benchmark_display_aggregates_only=true \
  --benchmark_out="$out/kiln.json" --benchmark_out_format=json

extra=()
autodiff="$build/bench/autodiff_bench"
if [ -x "$autodiff" ]; then
  "$autodiff" --benchmark_filter="$filter" --benchmark_repetitions="$repeats" \
    --benchmark_display_aggregates_only=true \
    --benchmark_out="$out/autodiff.json" --benchmark_out_format=json
  extra=(--extra "$out/autodiff.json")
else
  echo "run_all: $autodiff not found; no autodiff figures" >&2
fi
training="$build/bench/train_bench"
if [ -x "$training" ]; then
  "$training" --benchmark_filter="$filter" --benchmark_repetitions="$repeats" \
    --benchmark_display_aggregates_only=true \
    --benchmark_out="$out/train.json" --benchmark_out_format=json
  extra+=(--extra "$out/train.json")
fi

# Debian's interpreter carries python3-torch; the first python3 on PATH may not.
# KILN_PEER_PYTHON names another interpreter with torch (e.g. on the GPU machine).
python=${KILN_PEER_PYTHON:-/usr/bin/python3}
peer_json=""
if "$python" -c "import torch" 2>/dev/null; then
  "$python" bench/peer_torch.py --threads "$threads" --repeats "$repeats" --filter "$filter" \
    --out "$out/torch.json"
  peer_json="$out/torch.json"
else
  echo "run_all: /usr/bin/python3 cannot import torch (apt-get install python3-torch); no peer" >&2
fi
"$python" bench/report.py "$out/kiln.json" $peer_json "${extra[@]}" --json "$out/table.json"
