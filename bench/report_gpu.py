#!/usr/bin/env python3
"""The GPU table: workload, kiln median, rate, floor, kiln / floor, target, torch median, ratio.

  bench/report_gpu.py GPU_BENCH_JSON [TORCH_JSON] [--extra KILN_JSON ...] [--json SUMMARY_JSON]

GPU_BENCH_JSON is gpu_bench's --benchmark_out (with repetitions: the median aggregate is used);
--extra adds another kiln binary of the same run (gpu_ops_bench: the tensor-API rows);
TORCH_JSON is bench/peer_torch_gpu.py's output from the same run. Definitions:
  ratio = torch time / kiln time (> 1: kiln faster).
  floor = FLOPs / the H200's dense datasheet peak for the dtype (bf16, f16 989 TFLOP/s; tf32 495;
          f32 67 without tensor cores; /work/.library/device/H200.md: the H100's rates), or
          bytes moved / copy bandwidth, measured in this run by memcpy_d2d (read + write bytes).
          Rows count bytes the same way: every tensor read and written once (chain8: its 8 ops'
          11 reads + 8 writes of 4096^2 f32; softmax: one read + one write).
  "lib" rows time kiln_cuda_lib's raw functions with CUDA events (torch: events too); the
  others time kiln's tensor API on cuda:0 with wall clock + Device::sync (torch: wall clock +
  torch.cuda.synchronize()), per op.
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from report import fmt_time, load_kiln, load_peer  # noqa: E402  (same JSON reading as the CPU table)

PEAK = {"bf16": 989e12, "f16": 989e12, "f32": 67e12, "tf32": 495e12}
KIND = {0: "bf16", 1: "f16", 2: "f32", 3: "tf32"}
FLOOR_TARGET = "<= 1.25x floor"


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("kiln_json")
    parser.add_argument("torch_json", nargs="?")
    parser.add_argument("--extra", action="append", default=[],
                        help="results of another kiln benchmark binary (repeatable)")
    parser.add_argument("--inline", help="gpu_ops_bench's small_add_host with KILN_CUDA_DISPATCH=inline")
    parser.add_argument("--cpp-peer", help="bench/peer_libtorch_host's output (torch's C++ API)")
    parser.add_argument("--json")
    args = parser.parse_args()
    loaded = load_kiln(args.kiln_json)
    for path in args.extra:
        loaded.update(load_kiln(path))
    # Manual timing adds "/manual_time" to every name.
    kiln = {name.replace("/manual_time", ""): row for name, row in loaded.items()}
    peer = load_peer(args.torch_json, "report_gpu: no torch figures")
    cpp_peer = load_peer(args.cpp_peer, "report_gpu: no libtorch figures")

    if args.inline:
        for name, row in load_kiln(args.inline).items():
            kiln[name.replace("/manual_time", "") + "/inline"] = row

    copy = kiln.get("memcpy_d2d", {})
    bandwidth = copy["bytes"] / copy["median"] if "median" in copy and "bytes" in copy else None

    rows = []

    def add(workload, name, target="", peak=None, torch_name=None, peer=peer):
        row = kiln.get(name, {})
        ours = row.get("median")
        torch_row = peer.get(torch_name or name)
        theirs = torch_row.get("median_s") if isinstance(torch_row, dict) else None
        floor, rate = None, ""
        if ours and "flops" in row:
            rate = f"{row['flops'] / ours / 1e12:.0f} TFLOP/s"
            floor = row["flops"] / peak if peak else None
        elif ours and "bytes" in row:
            rate = f"{row['bytes'] / ours / 1e9:.0f} GB/s"
            floor = row["bytes"] / bandwidth if bandwidth and name != "memcpy_d2d" else None
        elif ours and "kernels" in row:
            rate = f"{row['kernels']:.0f} kernels"
        elif ours and "total_us_per_op" in row:  # with the wait for the queued work, per op
            rate = f"{row['total_us_per_op']:.2f} us/op with drain"
        elif ours and "gpu_drain_us" in row:  # GPU work still queued when the burst ended
            rate = f"drain {row['gpu_drain_us']:.0f} us"
        rows.append({"workload": workload, "name": name, "kiln_median_s": ours,
                     "error": row.get("error"), "torch_median_s": theirs,
                     "ratio": theirs / ours if ours and theirs else None, "floor_s": floor,
                     "rate": rate, "target": target})

    add("memcpy d2d 1 GiB (lib)", "memcpy_d2d")
    for n in (4096, 8192):
        for kind in range(4):
            add(f"matmul {KIND[kind]} {n}^2 (lib)", f"matmul/{kind}/{n}",
                "ratio >= 0.97" if n == 8192 else "", PEAK[KIND[kind]])
    add("sort 16M f32 + i64 idx (lib)", "sort/16777216", "ratio >= 1")
    # torch.sort always returns indices: the keys-only sorts are compared with it, marked so.
    add("sort 16M f32 keys (lib)", "sort_keys/16777216", "(torch with idx)", None, "sort/16777216")
    add("sort 16M keys, positions (lib)", "sort_keys_positions/16777216", "(torch with idx)", None,
        "sort/16777216")
    add("sort rows 4096x4096 f32 (lib)", "sort_rows/4096/4096")
    # The selection (generated kernels in the plugin) is timed through the Tensor API below.
    add("topk 8 by full sort (lib)", "topk_by_sort/4096/32768/8", "", None, "topk/4096/32768/8")
    add("sum 8192^2 f32, all", "sum/8192/all", FLOOR_TARGET)
    add("sum 8192^2 f32, last dim", "sum/8192/dim1", FLOOR_TARGET)
    add("sum 8192^2 f32, first dim", "sum/8192/dim0", FLOOR_TARGET)
    add("softmax 8192^2 f32, last dim", "softmax/8192", FLOOR_TARGET)
    add("log_softmax 8192^2 f32", "log_softmax/8192", FLOOR_TARGET)
    add("layer_norm 8192^2 f32", "layer_norm/8192", "<= 1.2x floor")
    add("layer_norm 65536x768 f32", "layer_norm/65536x768", "<= 1.2x floor")
    add("chain8 4096^2 f32 eager", "chain8/4096", "ratio >= 1")
    add("chain8 4096^2 f32 fused (torch.compile)", "chain8_fused/4096", "<= 74 us", None,
        "chain8_compiled/4096")
    add("chain8 4096^2 f32 fused (torch eager)", "chain8_fused/4096", "", None, "chain8/4096")
    add("chain8 8192^2 f32 eager", "chain8/8192", "ratio >= 1")
    add("chain8 8192^2 f32 fused (torch.compile)", "chain8_fused/8192", "<= 280 us", None,
        "chain8_compiled/8192")
    add("fma_exp 8192^2 f32 eager", "fma_exp/8192", "ratio >= 1")
    add("fma_exp 8192^2 f32 fused (torch.compile)", "fma_exp_fused/8192", "<= 280 us", None,
        "fma_exp_compiled/8192")
    add("exp_sum 8192^2 f32 eager", "exp_sum/8192", "ratio >= 1")
    add("exp_sum 8192^2 f32 fused (torch.compile)", "exp_sum_fused/8192", "ratio >= 1", None,
        "exp_sum_compiled/8192")
    add("small add 16 f32 host/op (torch: Python)", "small_add_host/16", "<= 3 us")
    if cpp_peer:
        add("small add 16 f32 host/op (torch: C++)", "small_add_host/16", "<= 3 us", peer=cpp_peer)
    add("small add, launched on the caller's thread", "small_add_host/16/inline", "", None,
        "small_add_host/16")
    add("empty kernel launch host/op (driver floor)", "launch_floor")
    add("chain8 64^2 host/op eager", "chain8_host/64")
    add("chain8 64^2 host/op fused", "chain8_host_fused/64", "<= 0.5 us")
    add("conv2d 32x64x56x56 3x3 f32", "conv2d/f32", "", PEAK["f32"])
    add("conv2d 32x64x56x56 3x3 bf16", "conv2d/bf16", "", PEAK["bf16"])
    add("conv2d 32x64x56x56 3x3 bf16 channels-last", "conv2d/bf16/nhwc", "", PEAK["bf16"])
    # Each path forced (KILN_CONV), against the same torch rows (cuDNN there).
    for dtype in ("f32", "bf16"):
        for path in ("cudnn", "kiln"):
            add(f"conv2d 32x64x56x56 3x3 {dtype}, KILN_CONV={path}", f"conv2d/{dtype}/{path}", "",
                PEAK[dtype], f"conv2d/{dtype}")
    add("conv2d 32x64x56x56 3x3 bf16, cuDNN legacy calls", "conv2d/bf16/legacy", "", PEAK["bf16"],
        "conv2d/bf16")
    add("conv2d 32x64x56x56 3x3 bf16 channels-last, cuDNN legacy calls", "conv2d/bf16/nhwc/legacy",
        "", PEAK["bf16"], "conv2d/bf16/nhwc")
    for channels, side in ((128, 28), (256, 14), (512, 7)):
        add(f"conv2d 32x{channels}x{side}x{side} 3x3 bf16 channels-last",
            f"conv2d/bf16/nhwc/{channels}x{side}", "ratio >= 1", PEAK["bf16"])
    for seq in (4096, 16384):
        for causal in ("", "/causal"):
            add(f"attention fwd bf16 4x16x{seq}x128{' causal' if causal else ''}",
                f"attention/bf16/{seq}{causal}", "ratio >= 1", PEAK["bf16"])
            add(f"attention fwd+bwd bf16 4x16x{seq}x128{' causal' if causal else ''}",
                f"attention_fwd_bwd/bf16/{seq}{causal}", "ratio >= 1", PEAK["bf16"])
    add("attention fwd+bwd bf16 4x16x4096x128 dropout 0.1", "attention_fwd_bwd/bf16/4096/dropout",
        "ratio >= 1", PEAK["bf16"])
    add("topk 8 of 4096x32768 f32", "tensor_topk/4096/32768/8")
    add("sort 16M f32 + i64 idx", "tensor_sort/16777216", "ratio >= 1")
    add("cumsum 16M f32, one row", "tensor_cumsum/16777216/0", FLOOR_TARGET)
    add("cumsum 8192^2 f32, last dim", "tensor_cumsum/8192/8192", FLOOR_TARGET)
    add("NVRTC first compile/kernel", "nvrtc_first_compile", "reported")
    add("NVRTC first compile/kernel, fused", "nvrtc_first_compile_fused", "<= 50 ms")
    add("disk cache load/kernel", "disk_cache_load", "reported")

    def cell(r):
        if r["kiln_median_s"] is None and r["error"]:
            return "skipped"
        return fmt_time(r["kiln_median_s"])

    def over_floor(r):
        if r["kiln_median_s"] and r["floor_s"]:
            return f"{r['kiln_median_s'] / r['floor_s']:.2f}x"
        return "-"

    header = ["workload", "kiln", "rate", "floor", "kiln/floor", "target", "torch", "ratio"]
    table = [[r["workload"], cell(r), r["rate"], fmt_time(r["floor_s"]), over_floor(r),
              r["target"], fmt_time(r["torch_median_s"]),
              f"{r['ratio']:.3f}" if r["ratio"] else "-"]
             for r in rows]
    widths = [max(len(str(line[i])) for line in table + [header]) for i in range(len(header))]
    print()
    print("  ".join(h.ljust(w) for h, w in zip(header, widths)).rstrip())
    print("  ".join("-" * w for w in widths))
    for line in table:
        print("  ".join(str(c).ljust(w) for c, w in zip(line, widths)).rstrip())
    print()
    # A failed result check skips its row too: every distinct reason, with the rows it hit.
    reasons = {}
    for r in rows:
        if r["kiln_median_s"] is None and r["error"]:
            reasons.setdefault(r["error"], []).append(r["name"])
    for reason, names in reasons.items():
        more = f" (+{len(names) - 1} more)" if len(names) > 1 else ""
        print(f"skipped {names[0]}{more}: {reason}")
    if bandwidth:
        print(f"copy bandwidth (memcpy_d2d, read + write): {bandwidth / 1e9:.0f} GB/s")
    if peer:
        print(f"peer: torch {peer.get('torch_version', '?')} on {peer.get('device', '?')}")
    if cpp_peer:
        print(f"C++ peer: torch {cpp_peer.get('torch_version', '?')} (bench/peer_libtorch_host.cpp)")
    print("ratio = torch time / kiln time (> 1: kiln faster). (lib): kiln_cuda_lib's raw functions,")
    print("CUDA events; other rows: kiln's tensor API, wall clock + sync per op (torch alike).")
    print("small add: host time per op in bursts of 200 without sync; 'with drain' adds the wait at")
    print("the sync after a burst (the driver's launch rate). 'caller's thread': KILN_CUDA_DISPATCH=")
    print("inline, no launcher thread. conv2d: torch through cuDNN, tf32 off. NVRTC/disk cache: per kernel, in")
    print("fresh processes on an empty, then a filled cache dir. floor: every byte from DRAM; chain8's")
    print("ops alternate directions and read part of each input from L2, so it can beat that floor.")
    print("(lib) rows: both sides make the same calls (gpu_bench's warm-up and iterations per repeat).")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"rows": rows, "bandwidth_bytes_per_s": bandwidth}, f, indent=1)


if __name__ == "__main__":
    main()
