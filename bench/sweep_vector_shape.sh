#!/usr/bin/env bash
# Times chain8 (gpu_ops_bench: 8 eager maps over 4096^2 f32) under each launch shape of the
# wide-load elementwise kernel (KILN_CUDA_VECTOR_SHAPE="threads,unroll,blocks-per-SM cap", 0: no
# cap), and torch's chain8 in the same call; prints one line per shape, fastest first. The
# default shape (src/backends/cuda/elementwise_source.cpp) comes from this sweep.
#   bench/sweep_vector_shape.sh [BUILD_DIR] [OUT_DIR] [SHAPE ...]
# Environment: KILN_BENCH_REPEATS (default 10), KILN_PEER_PYTHON (an interpreter with torch).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
out=${2:-$build/bench-results}
shift $(( $# < 2 ? $# : 2 ))
shapes=("$@")
# The default (128,1,0) comes first and last; 256,2,32 was the shape before the sweep.
[ ${#shapes[@]} -eq 0 ] && shapes=(128,1,0 128,2,0 128,4,0 256,1,0 256,2,0 256,4,0 512,1,0 512,2,0
                                   128,4,32 256,2,32 256,4,16 1024,1,0 128,1,0)
repeats=${KILN_BENCH_REPEATS:-10}
mkdir -p "$out/sweep"
for shape in "${shapes[@]}"; do
  # A shape seen twice (the default first and last) is run twice: the spread says what is noise.
  run=$(ls "$out/sweep" | grep -c "^${shape//,/_}\." || true)
  KILN_CUDA_VECTOR_SHAPE=$shape "$build/bench/gpu_ops_bench" --benchmark_filter='chain8' \
    --benchmark_repetitions="$repeats" --benchmark_display_aggregates_only=true \
    --benchmark_out="$out/sweep/${shape//,/_}.$run.json" --benchmark_out_format=json > /dev/null
done
python=${KILN_PEER_PYTHON:-python3}
"$python" bench/peer_torch_gpu.py --repeats "$repeats" --filter '^chain8' \
  --out "$out/sweep/torch.json" > /dev/null || echo "sweep: no torch figure" >&2
python3 - "$out/sweep" <<'EOF'
import glob, json, os, sys
folder = sys.argv[1]
torch = None
try:
    torch = json.load(open(os.path.join(folder, "torch.json")))["chain8/4096"]["median_s"]
except (OSError, KeyError, ValueError):
    pass
rows = []
for path in glob.glob(os.path.join(folder, "*_*.json")):
    name = os.path.basename(path).rsplit(".", 2)
    for b in json.load(open(path))["benchmarks"]:
        if b.get("aggregate_name") == "median":
            rows.append((b["real_time"] * {"us": 1e-6, "ms": 1e-3, "ns": 1e-9}[b["time_unit"]],
                         name[0].replace("_", ","), name[1]))
print(f"{'threads,unroll,cap':<20} {'run':>3} {'chain8':>10} {'torch/kiln':>10}")
for seconds, shape, run in sorted(rows):
    ratio = f"{torch / seconds:.3f}" if torch else "-"
    print(f"{shape:<20} {run:>3} {seconds * 1e6:>8.1f}us {ratio:>10}")
if torch:
    print(f"torch chain8: {torch * 1e6:.1f} us")
EOF
