#!/usr/bin/env python3
"""PyTorch GPU peer for bench/gpu_bench.cpp: the same workloads on the same device, timed with
CUDA events around each call after warm-up, median of the repeats. Prints (and writes with
--out) JSON: {"workload": {"median_s": ..., "repeats": ...}, "torch_version": ..., "device": ...}.
Names match gpu_bench's: matmul/<kind>/<n> (kind 0 bf16, 1 f16, 2 f32, 3 tf32), sort/<n>
(torch.sort: values and int64 indices), sort_rows/<rows>/<n>, topk/<rows>/<n>/<k>,
cumsum/<n>/0 (one row) and cumsum/<rows>/<n>, memcpy_d2d.

  python3 bench/peer_torch_gpu.py [--repeats 20] [--out torch_gpu.json]
"""
import argparse
import json
import statistics

import torch


def median_seconds(fn, repeats, warmup=3):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        start = torch.cuda.Event(enable_timing=True)
        stop = torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop) * 1e-3)
    return statistics.median(times)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--out")
    args = parser.parse_args()
    dev = torch.device("cuda")
    g = torch.Generator(device=dev).manual_seed(0)
    results = {"torch_version": torch.__version__, "device": torch.cuda.get_device_name()}

    def record(name, fn, repeats=args.repeats):
        results[name] = {"median_s": median_seconds(fn, repeats), "repeats": repeats}

    big = 1 << 30
    src = torch.ones(big, dtype=torch.uint8, device=dev)
    dst = torch.empty_like(src)
    record("memcpy_d2d", lambda: dst.copy_(src))
    del src, dst

    kinds = {0: (torch.bfloat16, False), 1: (torch.float16, False),
             2: (torch.float32, False), 3: (torch.float32, True)}
    for n in (4096, 8192):
        for kind, (dtype, tf32) in kinds.items():
            torch.backends.cuda.matmul.allow_tf32 = tf32
            a = (torch.rand(n, n, device=dev, generator=g) * 2 - 1).to(dtype)
            b = (torch.rand(n, n, device=dev, generator=g) * 2 - 1).to(dtype)
            record(f"matmul/{kind}/{n}", lambda: torch.matmul(a, b))
            del a, b
    torch.backends.cuda.matmul.allow_tf32 = False

    n = 1 << 24
    x = torch.rand(n, device=dev, generator=g) * 2 - 1
    record("sort/16777216", lambda: torch.sort(x))
    record("cumsum/16777216/0", lambda: torch.cumsum(x, 0), repeats=max(args.repeats, 50))
    del x
    m = torch.rand(4096, 4096, device=dev, generator=g)
    record("sort_rows/4096/4096", lambda: torch.sort(m, dim=-1))
    del m
    m = torch.rand(4096, 32768, device=dev, generator=g)
    record("topk/4096/32768/8", lambda: torch.topk(m, 8, dim=-1))
    del m
    m = torch.rand(8192, 8192, device=dev, generator=g)
    record("cumsum/8192/8192", lambda: torch.cumsum(m, -1), repeats=max(args.repeats, 50))

    text = json.dumps(results, indent=1)
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()
