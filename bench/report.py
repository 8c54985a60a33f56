#!/usr/bin/env python3
"""Turns one benchmark run into kiln's table: workload, kiln median, peer median, ratio, floor.

  bench/report.py KILN_JSON [PEER_JSON] [--extra KILN_JSON ...] [--json SUMMARY_JSON]

KILN_JSON is Google Benchmark's --benchmark_out of cpu_bench (with repetitions: the median
aggregate is used); --extra adds the results of other kiln benchmark binaries of the same run
(autodiff_bench); PEER_JSON is bench/peer_torch.py's output from the same run. Definitions:
  ratio  = peer time / kiln time (> 1: kiln is faster); for add vs memcpy the GB/s ratio.
  floor  = FLOPs / peak, peak = the best GFLOP/s of sgemm or kiln's matmul in any repeat of this run, or
           bytes moved / bandwidth, bandwidth = the best GB/s of the parallel memcpy and the
           STREAM triad (ordinary and streaming stores) in this run (reads + writes counted,
           write-allocate traffic not).
Standard library only, so any python3 runs it.
"""
import argparse
import json
import sys

UNIT_SECONDS = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0}


# Per-iteration counters a row may carry (google benchmark's user counters).
COUNTERS = ("flops", "bytes", "kernels", "gpu_drain_us", "total_us_per_op")


def load_peer(path, complaint):
    """A peer's JSON results ({} when path is None); an unreadable file is reported, not fatal."""
    if not path:
        return {}
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError) as error:
        print(f"{complaint} ({error})", file=sys.stderr)
        return {}


def load_kiln(path):
    """name -> {"median": s, "best": s, "flops"/"bytes": per iteration, "error": message}."""
    try:
        with open(path) as f:
            entries = json.load(f)["benchmarks"]
    except (OSError, ValueError, KeyError):
        # A binary whose benchmarks the filter excluded writes no results.
        return {}
    out = {}
    for e in entries:
        # "sgemm/1024/min_time:0.300/real_time" -> "sgemm/1024"
        name = "/".join(part for part in e.get("run_name", e["name"]).split("/")
                        if not part.startswith(("min_time:", "real_time", "repeats:",
                                                "iterations:")))
        row = out.setdefault(name, {"samples": []})
        if e.get("error_occurred"):
            row["error"] = e.get("error_message", "error")
            continue
        seconds = e["real_time"] * UNIT_SECONDS[e.get("time_unit", "ns")]
        counters = {c: e[c] for c in COUNTERS if c in e}
        if e.get("run_type") == "aggregate":
            if e.get("aggregate_name") == "median":
                row["median"] = seconds
                row.update(counters)  # the median of the repeats' counters
            continue
        row["samples"].append(seconds)
        for counter, value in counters.items():
            row.setdefault(counter, value)
    for row in out.values():
        samples = sorted(row.pop("samples"))
        if samples:
            row["best"] = samples[0]
            row.setdefault("median", samples[len(samples) // 2])
    return out


def fmt_time(seconds):
    if seconds is None:
        return "-"
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if seconds >= scale:
            return f"{seconds / scale:.3g} {unit}"
    return f"{seconds / 1e-9:.3g} ns"


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("kiln_json")
    parser.add_argument("peer_json", nargs="?")
    parser.add_argument("--extra", action="append", default=[],
                        help="results of another kiln benchmark binary (repeatable)")
    parser.add_argument("--json", help="also write the table as JSON here")
    args = parser.parse_args()

    kiln = load_kiln(args.kiln_json)
    for path in args.extra:
        try:
            kiln.update(load_kiln(path))
        except (OSError, ValueError, KeyError) as error:
            print(f"report: skipping {path} ({error})", file=sys.stderr)
    peer = load_peer(args.peer_json, "report: no peer figures")

    def median(name):
        return kiln.get(name, {}).get("median")

    sgemm_rates = [kiln[n]["flops"] / kiln[n]["best"] for n in kiln
                   if n.startswith(("sgemm/", "matmul/")) and "best" in kiln[n]]
    peak = max(sgemm_rates) if sgemm_rates else None
    memcpy = kiln.get("memcpy_large", {})
    copy_rates = [kiln[n]["bytes"] / kiln[n]["best"]
                  for n in ("memcpy_large", "triad_large", "triad_stream_large")
                  if "best" in kiln.get(n, {})]
    bandwidth = max(copy_rates) if copy_rates else None

    def floor(name):
        row = kiln.get(name, {})
        if "flops" in row and peak:
            return row["flops"] / peak
        if "bytes" in row and bandwidth:
            return row["bytes"] / bandwidth
        return None

    rows = []

    def add_row(workload, name, peer_name, peer_seconds, target="", rate=None, per=1):
        # per: the row's median divided by this (op_chain: time per op of its 64).
        row = kiln.get(name, {})
        ours = row.get("median")
        ours = ours / per if ours else ours
        peer_seconds = peer_seconds / per if peer_seconds else peer_seconds
        ratio = peer_seconds / ours if ours and peer_seconds else None
        kiln_cell = fmt_time(ours) if "error" not in row else "skipped"
        peer_cell = fmt_time(peer_seconds)
        if rate is not None and ours and peer_seconds:
            # Throughput cells for the bandwidth comparison.
            ours_rate, peer_rate = rate[0] / ours, rate[1] / peer_seconds
            kiln_cell += f" ({ours_rate / 1e9:.1f} GB/s)"
            peer_cell += f" ({peer_rate / 1e9:.1f} GB/s)"
            ratio = ours_rate / peer_rate
        rows.append({
            "workload": workload, "kiln": kiln_cell, "kiln_median_s": ours,
            "peer": f"{peer_name} {peer_cell}", "peer_median_s": peer_seconds,
            "ratio": ratio, "floor_s": floor(name), "target": target,
        })

    def torch_time(name):
        return peer.get(name, {}).get("median_s") if isinstance(peer.get(name), dict) else None

    add_row("small_add 16 f32", "small_add", "torch", torch_time("small_add"), "kiln <= 150 ns")
    # op_chain: 64 small elementwise ops, per op; fused against the same ops eager.
    for n in (16, 4096):
        add_row(f"op_chain 64 ops on {n} f32, fused, per op", f"op_chain_fused/{n}", "eager",
                median(f"op_chain_plain/{n}"), per=64)
    add_row("op_chain 64 ops recorded on 4096 f32, per op", "op_chain_fused_record/4096", "eager",
            median("op_chain_plain/4096"), "kiln <= 0.5 us", per=64)
    for n in (1024, 2048):
        add_row(f"matmul f32 {n}^2", f"matmul/{n}", "sgemm", median(f"sgemm/{n}"), "ratio >= 0.9")
    add_row("matmul bf16 1024^2", "matmul_bf16/1024", "torch", torch_time("matmul_bf16/1024"))
    add_row("matmul bf16 1024^2", "matmul_bf16/1024", "kiln f32", median("matmul/1024"))
    add_bytes = kiln.get("add_large", {}).get("bytes")
    add_row("add 4096^2 f32", "add_large", "memcpy", median("memcpy_large"), "ratio >= 0.8",
            rate=(add_bytes, memcpy.get("bytes")) if add_bytes and memcpy.get("bytes") else None)
    add_row("add 4096^2 f32", "add_large", "torch", torch_time("add_large"))
    add_row("chain8 4096^2 f32", "chain8_large", "torch", torch_time("chain8_large"))
    add_row("chain8 4096^2 f32, fused", "chain8_fused_large", "torch", torch_time("chain8_large"),
            "kiln <= 6 ms")
    add_row("fma_exp 4096^2 f32", "fma_exp_large", "torch", torch_time("fma_exp_large"))
    add_row("fma_exp 4096^2 f32, fused", "fma_exp_fused_large", "torch",
            torch_time("fma_exp_large"), "kiln <= 6 ms")
    add_row("conv2d 3x3 16x64x56x56", "conv2d", "torch", torch_time("conv2d"), "kiln <= 15 ms")
    add_row("conv2d input grad, same shape", "conv2d_x_backward", "torch",
            torch_time("conv2d_x_backward"))
    add_row("conv2d weight grad, same shape", "conv2d_weight_backward", "torch",
            torch_time("conv2d_weight_backward"))
    add_row("softmax 4096^2 dim -1", "softmax_large", "torch", torch_time("softmax_large"))
    add_row("softmax 4096^2 dim -1, fused", "softmax_fused_large", "torch",
            torch_time("softmax_large"), "kiln <= 3.5 ms")
    add_row("normal draw 4096^2 f32", "random_normal_large", "torch",
            torch_time("random_normal_large"))
    # autodiff_bench: the cost of recording a node, against the same add untracked.
    add_row("small_add tracked 16 f32", "small_add_tracked", "plain",
            median("small_add_plain"), "ratio >= 0.5 (<= 2x plain)")
    add_row("small_add tracked 16 f32", "small_add_tracked", "torch",
            torch_time("small_add_tracked"))
    for batch in (128, 4096):
        add_row(f"mlp_step 784-512-512-10 b{batch}", f"mlp_step/{batch}", "torch",
                torch_time(f"mlp_step/{batch}"))

    # train_bench: one epoch of the digits network.
    add_row("digits epoch (1797 images, b32)", "digits_epoch", "torch", torch_time("digits_epoch"))

    header = ["workload", "kiln median", "peer median", "ratio", "floor", "target"]
    table = [[r["workload"], r["kiln"], r["peer"],
              f"{r['ratio']:.2f}" if r["ratio"] else "-", fmt_time(r["floor_s"]), r["target"]]
             for r in rows]
    widths = [max(len(str(line[i])) for line in table + [header]) for i in range(len(header))]
    print()
    print("  ".join(h.ljust(w) for h, w in zip(header, widths)))
    print("  ".join("-" * w for w in widths))
    for line in table:
        print("  ".join(str(c).ljust(w) for c, w in zip(line, widths)))
    print()
    skipped = [f"skipped {name}: {row['error']}" for name, row in kiln.items() if "error" in row]
    if skipped:
        print("\n".join(skipped) + "\n")
    if peak:
        print(f"peak (best of sgemm, matmul): {peak / 1e9:.1f} GFLOP/s; ", end="")
    if bandwidth:
        print(f"bandwidth (best of parallel memcpy and triads): {bandwidth / 1e9:.1f} GB/s", end="")
    print()
    # cpu_conv_dnnl.cpp: the 3x3 rows run Winograd's algorithm (unless KILN_CONV_WINOGRAD=0).
    print("conv floors: the FLOPs of direct sums over the peak; Winograd's F(4x4, 3x3) multiplies "
          "2.25x less")
    if peer:
        print(f"peer: torch {peer.get('torch_version', '?')}, {peer.get('threads', '?')} threads")
    print("ratio = peer time / kiln time (> 1: kiln faster); add vs memcpy: GB/s ratio")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"rows": rows, "peak_flops": peak, "bandwidth_bytes_per_s": bandwidth}, f,
                      indent=1)


if __name__ == "__main__":
    main()
