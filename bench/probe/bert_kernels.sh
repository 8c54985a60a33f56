#!/usr/bin/env bash
# Times each kernel of one BERT forward on cuda:0 with Nsight Compute (GPU machine), summed by
# kernel name:  bench/probe/bert_kernels.sh BUILD_DIR minilm|base BATCH
# Nsight Compute runs each kernel alone with cold caches: the sum exceeds a forward's time, the
# shares are what it shows.
set -euo pipefail
build=$1 which=$2 batch=$3
g++ -std=c++20 -O1 bench/probe/bert_probe.cpp -Iinclude -L"$build" -lkiln_nn -lkiln \
  -Wl,-rpath,"$PWD/$build" -o /tmp/bert_probe
# The third forward's kernels: those of a run of three past those of a run of two (the first
# forward also draws the weights and compiles).
for n in 2 3; do
  ncu --clock-control none --metrics gpu__time_duration.sum --csv \
    env KILN_DEVICE=cuda:0 /tmp/bert_probe "$which" "$batch" $n 2>/dev/null | sed -n '/^"ID"/,$p' \
    > /tmp/ncu_bert_$n.csv || true
done
python3 - <<'PY'
import csv, collections
def rows(n):
    return [r for r in csv.DictReader(open(f'/tmp/ncu_bert_{n}.csv'))
            if r.get('Metric Name') == 'gpu__time_duration.sum']
last = rows(3)[len(rows(2)):]
scale = {'ns': 1e-3, 'nsecond': 1e-3, 'us': 1.0, 'usecond': 1.0, 'ms': 1e3, 'msecond': 1e3}
by_name = collections.defaultdict(lambda: [0, 0.0])
for r in last:
    us = float(r['Metric Value'].replace(',', '')) * scale[r['Metric Unit']]
    by_name[r['Kernel Name'][:100]][0] += 1
    by_name[r['Kernel Name'][:100]][1] += us
total = sum(v[1] for v in by_name.values())
for name, (n, us) in sorted(by_name.items(), key=lambda kv: -kv[1][1])[:25]:
    print(f"{us / 1e3:8.2f} ms {n:4d}x  {name}")
print(f"{total / 1e3:8.2f} ms in {len(last)} kernels")
PY
