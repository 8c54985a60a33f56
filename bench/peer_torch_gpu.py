#!/usr/bin/env python3
"""PyTorch GPU peer for bench/gpu_bench.cpp and bench/gpu_ops_bench.cpp: the same workloads on
the same device, median of the repeats. Prints (and writes with --out) JSON:
{"workload": {"median_s": ..., "repeats": ..., "timing": ...}, "torch_version": ..., "device": ...}.

gpu_bench's rows (kiln_cuda_lib's raw functions), timed as gpu_bench times them: its warm-up
calls, then each call between CUDA events, a repeat the mean of its iterations per repeat: matmul/<kind>/<n> (kind 0 bf16, 1 f16, 2 f32, 3 tf32), sort/<n> (torch.sort: values and
int64 indices), sort_rows/<rows>/<n>, topk/<rows>/<n>/<k>, memcpy_d2d.

gpu_ops_bench's rows (kiln's tensor API), timed as that program times kiln: a sample is wall
clock (perf_counter) around OPS calls and one torch.cuda.synchronize(), divided by OPS; a repeat
is the mean of ITERS samples (OPS and ITERS are gpu_ops_bench's per row). small_add_host/16 is
the host time of a burst of 200 adds with no sync inside, per add, from Python: the figure users
compare kiln with. conv2d/* is torch.nn.functional.conv2d through cuDNN (default algorithm
choice; tf32 off, since kiln's f32 conv computes in f32).

  python3 bench/peer_torch_gpu.py [--repeats 20] [--out torch_gpu.json] [--filter REGEX]

--filter times only the rows whose name matches (re.search), as --benchmark_filter does for the
kiln programs.
"""
import argparse
import json
import re
import statistics
import time

import torch

ROWS = re.compile(".")  # --filter


def median_seconds(fn, repeats, warmup=3, iters=20):
    """gpu_bench's protocol (time_with_events under Google Benchmark): REPEATS samples, each
    WARMUP calls and then the mean of ITERS calls timed one by one with CUDA events; the median.
    The same count of calls on both sides keeps the GPU equally warm (clocks fall under a long
    heavy load)."""
    start = torch.cuda.Event(enable_timing=True)
    stop = torch.cuda.Event(enable_timing=True)
    samples = []
    for _ in range(repeats):
        for _ in range(warmup):  # per repeat, as each repetition runs time_with_events anew
            fn()
        torch.cuda.synchronize()
        total = 0.0
        for _ in range(iters):
            start.record()
            fn()
            stop.record()
            stop.synchronize()
            total += start.elapsed_time(stop) * 1e-3
        samples.append(total / iters)
    return statistics.median(samples)


def wall_seconds(fn, ops, iters, repeats, warmup=2):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    samples = []
    for _ in range(repeats):
        total = 0.0
        for _ in range(iters):
            start = time.perf_counter()
            for _ in range(ops):
                fn()
            torch.cuda.synchronize()
            total += (time.perf_counter() - start) / ops
        samples.append(total / iters)
    return statistics.median(samples)


def host_burst_seconds(fn, burst, iters, repeats, warmup=2):
    """Host time per call of a burst with no sync inside; the GPU drains it untimed."""
    for _ in range(warmup):
        fn()
    samples = []
    for _ in range(repeats):
        total = 0.0
        for _ in range(iters):
            torch.cuda.synchronize()
            start = time.perf_counter()
            for _ in range(burst):
                fn()
            total += (time.perf_counter() - start) / burst
        torch.cuda.synchronize()
        samples.append(total / iters)
    return statistics.median(samples)


def tensor_api_rows(results, dev, g, repeats):
    """gpu_ops_bench's rows; OPS and ITERS as there."""

    def record(name, fn, ops, iters=5):
        if not ROWS.search(name):
            return
        results[name] = {"median_s": wall_seconds(fn, ops, iters, repeats), "repeats": repeats,
                         "timing": "wall clock + synchronize"}

    n = 8192
    x = torch.rand(n, n, device=dev, generator=g)
    record("sum/8192/all", lambda: x.sum(), 20)
    record("sum/8192/dim1", lambda: x.sum(dim=1, keepdim=True), 20)
    record("sum/8192/dim0", lambda: x.sum(dim=0, keepdim=True), 20)
    x = torch.rand(n, n, device=dev, generator=g) * 8 - 4
    record("softmax/8192", lambda: torch.softmax(x, -1), 10)
    record("log_softmax/8192", lambda: torch.log_softmax(x, -1), 10)
    w = torch.rand(n, device=dev, generator=g) + 0.5
    b = torch.rand(n, device=dev, generator=g) * 2 - 1
    record("layer_norm/8192", lambda: torch.nn.functional.layer_norm(x, (n,), w, b, 1e-5), 10)
    del w, b
    rows, width = 65536, 768
    xs = torch.rand(rows, width, device=dev, generator=g) * 8 - 4
    w = torch.rand(width, device=dev, generator=g) + 0.5
    b = torch.rand(width, device=dev, generator=g) * 2 - 1
    record("layer_norm/65536x768",
           lambda: torch.nn.functional.layer_norm(xs, (width,), w, b, 1e-5), 10)
    del xs, w, b
    del x

    def chain8(x, y, z):
        return ((((-(x * y + z)).exp() * 2) + 1).tanh()) * x

    def fma_exp(x, y, z):
        return (x * y + z).exp()

    def exp_sum(x, y, z):
        return (x * y + z).exp().sum(dim=1, keepdim=True)

    # torch.compile (default mode) is the fused peer of kiln's fused rows: one Triton kernel.
    compiled = {}
    try:
        compiled = {"chain8": torch.compile(chain8), "fma_exp": torch.compile(fma_exp),
                    "exp_sum": torch.compile(exp_sum)}
    except Exception as error:  # no Triton or no compiler: the compiled rows are left out
        print(f"peer_torch_gpu: torch.compile unavailable: {error}")
    for n in (4096, 8192):
        x, y, z = (torch.rand(n, n, device=dev, generator=g) * 2 - 1 for _ in range(3))
        for name, fn in (("chain8", chain8), ("fma_exp", fma_exp), ("exp_sum", exp_sum)):
            if name != "chain8" and n != 8192:
                continue
            record(f"{name}/{n}", lambda fn=fn: fn(x, y, z), 5)
            if name in compiled and ROWS.search(f"{name}_compiled/{n}"):
                try:
                    record(f"{name}_compiled/{n}", lambda fn=compiled[name]: fn(x, y, z), 5)
                except Exception as error:
                    print(f"peer_torch_gpu: torch.compile of {name} failed: {error}")
        del x, y, z

    a = torch.rand(16, device=dev, generator=g) - 0.5
    b = torch.rand(16, device=dev, generator=g) - 0.5
    if ROWS.search("small_add_host/16"):
        results["small_add_host/16"] = {
            "median_s": host_burst_seconds(lambda: a + b, 200, 50, repeats), "repeats": repeats,
            "timing": "host wall clock of a burst of 200, Python"}

    torch.backends.cudnn.allow_tf32 = False
    for name, dtype in (("conv2d/f32", torch.float32), ("conv2d/bf16", torch.bfloat16)):
        x = (torch.rand(32, 64, 56, 56, device=dev, generator=g) * 2 - 1).to(dtype)
        w = ((torch.rand(64, 64, 3, 3, device=dev, generator=g) * 2 - 1) * 0.1).to(dtype)
        record(name, lambda: torch.nn.functional.conv2d(x, w, stride=1, padding=1), 5)
        if dtype == torch.bfloat16:
            x = x.to(memory_format=torch.channels_last)
            w = w.to(memory_format=torch.channels_last)
            record(name + "/nhwc", lambda: torch.nn.functional.conv2d(x, w, stride=1, padding=1), 5)
        del x, w
    # ResNet-50's other 3x3 layers, batch 32, bf16 channels-last.
    for channels, side in ((128, 28), (256, 14), (512, 7)):
        x = ((torch.rand(32, channels, side, side, device=dev, generator=g) * 2 - 1)
             .to(torch.bfloat16).to(memory_format=torch.channels_last))
        w = (((torch.rand(channels, channels, 3, 3, device=dev, generator=g) * 2 - 1) * 0.1)
             .to(torch.bfloat16).to(memory_format=torch.channels_last))
        record(f"conv2d/bf16/nhwc/{channels}x{side}",
               lambda: torch.nn.functional.conv2d(x, w, stride=1, padding=1), 5)
        del x, w
    torch.backends.cudnn.allow_tf32 = True

    for seq in (4096, 16384):
        q, k, v = ((torch.rand(4, 16, seq, 128, device=dev, generator=g) * 2 - 1).to(torch.bfloat16)
                   for _ in range(3))
        for causal in (False, True):
            name = f"attention/bf16/{seq}" + ("/causal" if causal else "")
            record(name, lambda: torch.nn.functional.scaled_dot_product_attention(
                q, k, v, is_causal=causal), 3)
        for t in (q, k, v):
            t.requires_grad_()
        grad = (torch.rand(4, 16, seq, 128, device=dev, generator=g) * 2 - 1).to(torch.bfloat16)
        for causal in (False, True):
            def fwd_bwd():
                out = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)
                out.backward(grad)
            record(f"attention_fwd_bwd/bf16/{seq}" + ("/causal" if causal else ""), fwd_bwd, 2)
        if seq == 4096:
            def fwd_bwd_dropout():
                out = torch.nn.functional.scaled_dot_product_attention(q, k, v, dropout_p=0.1)
                out.backward(grad)
            record("attention_fwd_bwd/bf16/4096/dropout", fwd_bwd_dropout, 2)
        del q, k, v, grad

    m = torch.rand(4096, 32768, device=dev, generator=g) * 2 - 1
    record("tensor_topk/4096/32768/8", lambda: torch.topk(m, 8, dim=-1), 2)
    del m
    v = torch.rand(1 << 24, device=dev, generator=g) * 2 - 1
    record("tensor_sort/16777216", lambda: torch.sort(v), 3)
    record("tensor_cumsum/16777216/0", lambda: torch.cumsum(v, 0), 5)
    del v
    m = torch.rand(8192, 8192, device=dev, generator=g)
    record("tensor_cumsum/8192/8192", lambda: torch.cumsum(m, -1), 5)
    del m


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--out")
    parser.add_argument("--filter", default=".")
    args = parser.parse_args()
    global ROWS
    ROWS = re.compile(args.filter)
    dev = torch.device("cuda")
    g = torch.Generator(device=dev).manual_seed(0)
    results = {"torch_version": torch.__version__, "device": torch.cuda.get_device_name()}

    def record(name, fn, warmup, iters, repeats=args.repeats):
        """WARMUP and ITERS as gpu_bench's row of that name."""
        if not ROWS.search(name):
            return
        results[name] = {"median_s": median_seconds(fn, repeats, warmup, iters),
                         "repeats": repeats, "iterations": iters,
                         "timing": "CUDA events, gpu_bench's warm-up and iterations"}

    big = 1 << 30
    src = torch.ones(big, dtype=torch.uint8, device=dev)
    dst = torch.empty_like(src)
    record("memcpy_d2d", lambda: dst.copy_(src), 3, 20)
    del src, dst

    kinds = {0: (torch.bfloat16, False), 1: (torch.float16, False),
             2: (torch.float32, False), 3: (torch.float32, True)}
    for n in (4096, 8192):
        for kind, (dtype, tf32) in kinds.items():
            torch.backends.cuda.matmul.allow_tf32 = tf32
            a = (torch.rand(n, n, device=dev, generator=g) * 2 - 1).to(dtype)
            b = (torch.rand(n, n, device=dev, generator=g) * 2 - 1).to(dtype)
            record(f"matmul/{kind}/{n}", lambda: torch.matmul(a, b), 5, 20)
            del a, b
    torch.backends.cuda.matmul.allow_tf32 = False

    n = 1 << 24
    x = torch.rand(n, device=dev, generator=g) * 2 - 1
    record("sort/16777216", lambda: torch.sort(x), 3, 20)
    del x
    m = torch.rand(4096, 4096, device=dev, generator=g)
    record("sort_rows/4096/4096", lambda: torch.sort(m, dim=-1), 3, 20)
    del m
    m = torch.rand(4096, 32768, device=dev, generator=g)
    record("topk/4096/32768/8", lambda: torch.topk(m, 8, dim=-1), 3, 10)
    del m
    tensor_api_rows(results, dev, g, args.repeats)

    text = json.dumps(results, indent=1)
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()
