#!/usr/bin/env python3
"""The all_reduce table on GPUs: kiln over NCCL (bench/dist_bench.cpp, KILN_BENCH_DEVICE=cuda)
against PyTorch over NCCL (bench/peer_torch_nccl.py) from the same run.

  bench/report_dist.py PEER_JSON_LINES KILN_JSON [KILN_JSON ...]

Each KILN_JSON is dist_bench's --benchmark_out (threads: two GPUs of one process; processes: a
process per GPU under `kiln launch`). Bus bandwidth as nccl-tests defines it (algbw * 2 (n - 1) /
n), in GB/s (1e9 bytes a second); ratio = kiln busbw / torch busbw (the target for 256 MiB on two
GPUs is >= 0.90).
"""
import json
import re
import sys


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    peer = {}
    with open(sys.argv[1]) as lines:
        for line in lines:
            line = line.strip()
            if line.startswith("{"):
                row = json.loads(line)
                peer[row["mib"]] = row
    print(f"{'workload':40} {'kiln ms':>9} {'kiln GB/s':>10} {'torch ms':>9} {'torch GB/s':>11}"
          f" {'ratio':>6}")
    for path in sys.argv[2:]:
        try:
            with open(path) as f:
                results = json.load(f)
        except (OSError, ValueError) as error:
            print(f"{path}: no results ({error})")
            continue
        for bench in results.get("benchmarks", []):
            name = bench["name"]
            if bench.get("error_occurred"):
                print(f"{name:40} skipped: {bench.get('error_message', '')}")
                continue
            size = re.search(r"/(\d+)/", name + "/")
            mib = int(size.group(1)) if size else 0
            calls = bench.get("calls", 1)
            unit = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0}[bench.get("time_unit", "ns")]
            seconds = bench["real_time"] * unit / calls
            busbw = bench["busbw"]
            line = f"{name.split('/iterations')[0]:40} {seconds * 1e3:9.3f} {busbw / 1e9:10.1f}"
            if mib in peer:
                theirs = peer[mib]
                line += (f" {theirs['seconds'] * 1e3:9.3f} {theirs['busbw'] / 1e9:11.1f}"
                         f" {busbw / theirs['busbw']:6.2f}")
            print(line)


if __name__ == "__main__":
    main()
