#!/usr/bin/env bash
# Times each kernel of a captured mlp_step replay with Nsight Compute (GPU machine):
#   bench/probe/mlp_graph_kernels.sh BUILD_DIR BATCH
# Prints the last replay's kernels (duration in us, name) and their sum. Nsight Compute runs each
# kernel alone with cold caches: the sum exceeds a replay's time, the shares are what it shows.
set -euo pipefail
build=$1 batch=$2
g++ -std=c++20 -O1 bench/probe/mlp_graph_probe.cpp -Iinclude -L"$build" -lkiln \
  -Wl,-rpath,"$PWD/$build" -o /tmp/mlp_graph_probe
nodes=$(KILN_GRAPH_NODES=1 /tmp/mlp_graph_probe "$batch" 1 2>&1 | sed -n 's/.*graph of \([0-9]*\) nodes.*/\1/p')
ncu --clock-control none --graph-profiling node --metrics gpu__time_duration.sum --csv \
  /tmp/mlp_graph_probe "$batch" 3 2>/dev/null | sed -n '/^"ID"/,$p' > /tmp/ncu_rows.csv || true
python3 - "$nodes" <<'PY'
import csv, sys
nodes = int(sys.argv[1])
rows = [r for r in csv.DictReader(open('/tmp/ncu_rows.csv'))
        if r.get('Metric Name') == 'gpu__time_duration.sum']
last = rows[-nodes:]
total = 0.0
for r in last:
    unit, value = r['Metric Unit'], float(r['Metric Value'].replace(',', ''))
    scale = {'ns': 1e-3, 'nsecond': 1e-3, 'us': 1.0, 'usecond': 1.0, 'ms': 1e3, 'msecond': 1e3}
    us = value * scale[unit]
    total += us
    print(f"{us:8.2f} us  {r['Kernel Name'][:90]}")
print(f"{total:8.2f} us  sum of {len(last)} kernels (graph of {nodes} nodes)")
PY
