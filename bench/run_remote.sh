#!/usr/bin/env bash
# The remote backend's benchmarks: starts `kiln serve` (CPU) on a free loopback port, runs
# bench/remote_bench.cpp against it and autodiff_bench's mlp_step/128 on the local CPU and through
# the server (alternating, so both see the same machine), then prints the table with the ratios.
#   bench/run_remote.sh [BUILD_DIR]          (default: build)
# Environment: KILN_BENCH_THREADS (default 2), KILN_BENCH_REPEATS (default 9),
# KILN_BENCH_SERVER_DEVICE (default cpu; cuda:0 on a GPU machine: the server runs there, and the
# local mlp_step it is compared with too).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
threads=${KILN_BENCH_THREADS:-2}
repeats=${KILN_BENCH_REPEATS:-9}
server_device=${KILN_BENCH_SERVER_DEVICE:-cpu}
out="$build/bench-results"
mkdir -p "$out"
for binary in "$build/tools/kiln/kiln" "$build/bench/remote_bench" "$build/bench/autodiff_bench"; do
  if [ ! -x "$binary" ]; then
    echo "run_remote: $binary not found (build kiln_cli, remote_bench and autodiff_bench)" >&2
    exit 1
  fi
done
export OMP_NUM_THREADS=$threads OPENBLAS_NUM_THREADS=$threads

token_file=$(mktemp)
head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$token_file"
export KILN_REMOTE_TOKEN=$(cat "$token_file")
servers=()
trap 'kill "${servers[@]}" 2>/dev/null || true; rm -f "$token_file"' EXIT
# start_server LOG [kiln serve options...]: sets url to the new server's address.
start_server() {
  local log=$1 port=""
  shift
  "$build/tools/kiln/kiln" serve --port 0 --device "$server_device" --token-file "$token_file" \
    "$@" > "$log" 2>&1 &
  servers+=($!)
  for _ in $(seq 100); do
    port=$(sed -n 's/.*listening on 127.0.0.1:\([0-9]*\).*/\1/p' "$log")
    [ -n "$port" ] && break
    sleep 0.05
  done
  if [ -z "$port" ]; then
    echo "run_remote: kiln serve did not start:" >&2
    cat "$log" >&2
    exit 1
  fi
  url="remote://127.0.0.1:$port"
}

# The upload rows again against a server whose session may hold 1 GiB: the client's cache of
# uploads (a quarter of that) then evicts, and each new upload lands in memory the server has
# used before. With the default 16 GiB every upload of the benchmark is new memory, whose first
# touch the machine may make the larger cost (the development VM, a Firecracker guest, hands free
# 8 MB blocks back to its host: a 2 MB page split from one faults in the host at its first touch,
# 150-200 ms for each 64 MB, where pages the guest still holds take 7-8 ms).
reused_log=$(mktemp)
start_server "$reused_log" --max-session-bytes $((1 << 30))
# A second of uploads first fills the cache, so that every timed one follows an eviction.
KILN_BENCH_REMOTE=$url "$build/bench/remote_bench" --benchmark_filter='^upload/' \
  --benchmark_min_warmup_time=1 --benchmark_repetitions="$repeats" --benchmark_display_aggregates_only=true \
  --benchmark_out="$out/remote_reused.json" --benchmark_out_format=json > /dev/null
kill "${servers[0]}"
log=$(mktemp)
start_server "$log"

KILN_BENCH_REMOTE=$url "$build/bench/remote_bench" --benchmark_repetitions="$repeats" \
  --benchmark_display_aggregates_only=true \
  --benchmark_out="$out/remote.json" --benchmark_out_format=json
for round in 1 2; do
  for where in cpu remote; do
    device=$server_device
    [ "$where" = remote ] && device=$url
    KILN_BENCH_DEVICE=$device "$build/bench/autodiff_bench" --benchmark_filter='^mlp_step/128' \
      --benchmark_repetitions="$repeats" --benchmark_display_aggregates_only=true \
      --benchmark_out="$out/mlp_${where}_$round.json" --benchmark_out_format=json > /dev/null
  done
done
python3 bench/report_remote.py "$out" "$server_device"
echo "server log:"
cat "$log"
