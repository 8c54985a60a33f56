#!/usr/bin/env python3
"""The median of one benchmark row in microseconds, for the probe scripts.

  median_us.py KILN_JSON         Google Benchmark's JSON (--benchmark_out): its median aggregate
  median_us.py PEER_JSON ROW     bench/peer_torch_gpu.py's JSON: ROW's median_s
"""
import json
import sys

UNIT_US = {"ns": 1e-3, "us": 1.0, "ms": 1e3, "s": 1e6}

data = json.load(open(sys.argv[1]))
if len(sys.argv) > 2:
    print(round(data[sys.argv[2]]["median_s"] * 1e6, 1))
else:
    row = next(r for r in data["benchmarks"] if r.get("aggregate_name") == "median")
    print(round(row["real_time"] * UNIT_US[row.get("time_unit", "ns")], 1))
