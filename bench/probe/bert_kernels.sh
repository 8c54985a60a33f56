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
python3 bench/probe/ncu_last_run.py /tmp/ncu_bert_2.csv /tmp/ncu_bert_3.csv
