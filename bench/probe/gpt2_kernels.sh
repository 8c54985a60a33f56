#!/usr/bin/env bash
# Times each kernel of one GPT-2-small-shaped training step on cuda:0 with Nsight Compute (GPU
# machine), summed by kernel name:  bench/probe/gpt2_kernels.sh BUILD_DIR f32|bf16 LAYERS
# (LAYERS of GPT-2's 12 keep the profile short; the per-layer kernels scale with it). Nsight
# Compute runs each kernel alone with cold caches: the sum exceeds a step's time, the shares are
# what it shows.
set -euo pipefail
build=$1 precision=$2 layers=$3
g++ -std=c++20 -O1 bench/probe/gpt2_probe.cpp -I. -Iinclude -L"$build" -lkiln_nn -lkiln \
  -Wl,-rpath,"$PWD/$build" -o /tmp/gpt2_probe
# The third step's kernels: those of a run of three past those of a run of two (the first step
# also draws the weights and compiles).
for n in 2 3; do
  ncu --clock-control none --metrics gpu__time_duration.sum --csv \
    /tmp/gpt2_probe "$precision" "$layers" $n 2>/dev/null | sed -n '/^"ID"/,$p' \
    > /tmp/ncu_gpt2_$n.csv || true
done
python3 bench/probe/ncu_last_run.py /tmp/ncu_gpt2_2.csv /tmp/ncu_gpt2_3.csv "${TOP:-25}"
