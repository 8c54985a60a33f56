#!/usr/bin/env python3
"""The GPU table: workload, kiln median, torch median, ratio, floor, target.

  bench/report_gpu.py GPU_BENCH_JSON [TORCH_JSON] [--json SUMMARY_JSON]

GPU_BENCH_JSON is gpu_bench's --benchmark_out (with repetitions: the median aggregate is used);
TORCH_JSON is bench/peer_torch_gpu.py's output from the same run. Definitions:
  ratio = torch time / kiln time (> 1: kiln faster).
  floor = FLOPs / the H200's dense datasheet peak for the dtype (bf16, f16 989 TFLOP/s; tf32 495;
          f32 67 without tensor cores; /work/.library/device/H200.md: the H100's rates), or
          bytes moved / copy bandwidth, measured in this run by memcpy_d2d (read + write bytes).
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from report import fmt_time, load_kiln  # noqa: E402  (same JSON reading as the CPU table)

PEAK = {0: 989e12, 1: 989e12, 2: 67e12, 3: 495e12}
KIND = {0: "bf16", 1: "f16", 2: "f32", 3: "tf32"}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("kiln_json")
    parser.add_argument("torch_json", nargs="?")
    parser.add_argument("--json")
    args = parser.parse_args()
    # Manual (CUDA event) timing adds "/manual_time" to every name.
    kiln = {name.replace("/manual_time", ""): row
            for name, row in load_kiln(args.kiln_json).items()}
    peer = {}
    if args.torch_json:
        try:
            with open(args.torch_json) as f:
                peer = json.load(f)
        except (OSError, ValueError) as error:
            print(f"report_gpu: no torch figures ({error})", file=sys.stderr)

    copy = kiln.get("memcpy_d2d", {})
    bandwidth = copy["bytes"] / copy["median"] if "median" in copy and "bytes" in copy else None

    rows = []

    def add(workload, name, floor=None, target=""):
        ours = kiln.get(name, {}).get("median")
        theirs = peer.get(name, {}).get("median_s") if isinstance(peer.get(name), dict) else None
        rate = ""
        row = kiln.get(name, {})
        if ours and "flops" in row:
            rate = f"{row['flops'] / ours / 1e12:.0f} TFLOP/s"
        elif ours and "bytes" in row:
            rate = f"{row['bytes'] / ours / 1e9:.0f} GB/s"
        rows.append({"workload": workload, "kiln_median_s": ours, "torch_median_s": theirs,
                     "ratio": theirs / ours if ours and theirs else None, "floor_s": floor,
                     "rate": rate, "target": target})

    add("memcpy d2d 1 GiB", "memcpy_d2d")
    for n in (4096, 8192):
        for kind in range(4):
            name = f"matmul/{kind}/{n}"
            flops = kiln.get(name, {}).get("flops", 2.0 * n ** 3)
            add(f"matmul {KIND[kind]} {n}^2", name, flops / PEAK[kind],
                "ratio >= 0.97" if n == 8192 else "")
    for name, label, target in (("sort/16777216", "sort 16M f32 (+ i64 indices)", "ratio >= 1"),
                                ("sort_keys/16777216", "sort 16M f32 keys only", ""),
                                ("sort_keys_lists/16777216", "sort 16M f32 keys, lists", ""),
                                ("sort_rows/4096/4096", "sort rows 4096x4096 f32 (+ idx)", ""),
                                ("topk/4096/32768/8", "topk 8 of rows 4096x32768 f32", ""),
                                ("cumsum/16777216/0", "cumsum 16M f32", ""),
                                ("cumsum/8192/8192", "cumsum rows 8192x8192 f32", "")):
        row = kiln.get(name, {})
        floor = row["bytes"] / bandwidth if bandwidth and "bytes" in row else None
        add(label, name, floor, target)
    # torch.sort always returns indices: compare the keys-only sort to it too, marked as such.
    keys_row = next(r for r in rows if r["workload"] == "sort 16M f32 keys only")
    if "sort/16777216" in peer and keys_row["kiln_median_s"]:
        keys_row["torch_median_s"] = peer["sort/16777216"]["median_s"]
        keys_row["ratio"] = keys_row["torch_median_s"] / keys_row["kiln_median_s"]
        keys_row["target"] = "(torch with indices)"

    header = ["workload", "kiln median", "rate", "torch median", "ratio", "floor", "target"]
    table = [[r["workload"], fmt_time(r["kiln_median_s"]), r["rate"], fmt_time(r["torch_median_s"]),
              f"{r['ratio']:.3f}" if r["ratio"] else "-", fmt_time(r["floor_s"]), r["target"]]
             for r in rows]
    widths = [max(len(str(line[i])) for line in table + [header]) for i in range(len(header))]
    print()
    print("  ".join(h.ljust(w) for h, w in zip(header, widths)))
    print("  ".join("-" * w for w in widths))
    for line in table:
        print("  ".join(str(c).ljust(w) for c, w in zip(line, widths)))
    print()
    if bandwidth:
        print(f"copy bandwidth (memcpy_d2d, read + write): {bandwidth / 1e9:.0f} GB/s")
    if peer:
        print(f"peer: torch {peer.get('torch_version', '?')} on {peer.get('device', '?')}")
    print("ratio = torch time / kiln time (> 1: kiln faster)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"rows": rows, "bandwidth_bytes_per_s": bandwidth}, f, indent=1)


if __name__ == "__main__":
    main()
