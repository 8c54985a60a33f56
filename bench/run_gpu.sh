#!/usr/bin/env bash
# Runs gpu_bench (kiln_cuda_lib's raw functions), gpu_ops_bench (kiln's tensor API on cuda:0)
# and the PyTorch GPU peer in one invocation on the same device, then prints the table
# (bench/report_gpu.py; also written to OUT_DIR/gpu_table.txt).
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
small_add=false  # the filter selects the small add's host cost (its extra runs and peer)
[[ "$filter" == . || "small_add_host" =~ $filter ]] && small_add=true
binary="$build/bench/gpu_bench"
if [ ! -x "$binary" ]; then
  echo "run_gpu: $binary not found (configure with KILN_CUDA and KILN_BUILD_BENCH on)" >&2
  exit 1
fi
"$binary" --benchmark_filter="$filter" --benchmark_repetitions="$repeats" \
  --benchmark_display_aggregates_only=true \
  --benchmark_out="$out/gpu_bench.json" --benchmark_out_format=json
extra=()
ops="$build/bench/gpu_ops_bench"
if [ -x "$ops" ]; then
  "$ops" --benchmark_filter="$filter" --benchmark_repetitions="$repeats" \
    --benchmark_display_aggregates_only=true \
    --benchmark_out="$out/gpu_ops_bench.json" --benchmark_out_format=json
  extra=(--extra "$out/gpu_ops_bench.json")
  # The small add again with launches on the calling thread (no launcher thread).
  if $small_add; then
    KILN_CUDA_DISPATCH=inline "$ops" --benchmark_filter='small_add_host' \
      --benchmark_repetitions="$repeats" --benchmark_display_aggregates_only=true \
      --benchmark_out="$out/gpu_ops_inline.json" --benchmark_out_format=json
    extra+=(--inline "$out/gpu_ops_inline.json")
  fi
else
  echo "run_gpu: $ops not found; no tensor-API rows" >&2
fi
python=${KILN_PEER_PYTHON:-python3}
peer=""
if "$python" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; then
  "$python" bench/peer_torch_gpu.py --repeats "$repeats" --filter "$filter" --out "$out/torch_gpu.json" > /dev/null
  peer="$out/torch_gpu.json"
  # torch's C++ API for the small add's host cost, built against the same torch (its headers and
  # libraries ship in the wheel); skipped when that build fails.
  if $small_add; then
    read -r torch_dir torch_version abi < <("$python" -c "import os, torch; print(
      os.path.dirname(torch.__file__), torch.__version__, int(torch._C._GLIBCXX_USE_CXX11_ABI))")
  fi
  if $small_add &&
     g++ -O2 -std=c++17 -D_GLIBCXX_USE_CXX11_ABI="$abi" -DKILN_TORCH_VERSION="\"$torch_version\"" \
       -I"$torch_dir/include" -I"$torch_dir/include/torch/csrc/api/include" \
       bench/peer_libtorch_host.cpp -o "$out/peer_libtorch_host" -L"$torch_dir/lib" \
       -Wl,--no-as-needed -ltorch_cuda -ltorch_cpu -ltorch -lc10 -Wl,-rpath,"$torch_dir/lib" \
       2>"$out/peer_libtorch_host.log"; then
    "$out/peer_libtorch_host" --repeats "$repeats" --out "$out/libtorch_host.json" > /dev/null &&
      extra+=(--cpp-peer "$out/libtorch_host.json")
  else
    echo "run_gpu: no libtorch C++ peer (see $out/peer_libtorch_host.log)" >&2
  fi
else
  echo "run_gpu: $python has no torch with CUDA; no peer figures" >&2
fi
python3 bench/report_gpu.py "$out/gpu_bench.json" $peer "${extra[@]}" --json "$out/gpu_table.json" \
  | tee "$out/gpu_table.txt"
