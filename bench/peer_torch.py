#!/usr/bin/python3
"""PyTorch CPU peer for bench/cpu_bench.cpp: the same workloads (DESIGN.md §8), timed with
timeit, median of many repeats. Prints JSON: {"workload": {"median_s": ..., "repeats": ...}}.

Run with Debian's interpreter (/usr/bin/python3 with python3-torch); bench/run_all.sh does.
  /usr/bin/python3 bench/peer_torch.py --threads 2 [--repeats 15] [--out peer.json]
"""
import argparse
import json
import statistics
import sys
import timeit

import torch
import torch.nn.functional as F

LARGE = 4096


def chain8(x, y, z):
    return torch.tanh(torch.exp(-(x * y + z)) * 2 + 1) * x


def fma_exp(a, b, c):
    return torch.exp(a * b + c)


def read_one(t):
    # The same read-back as the C++ side: one element, so a lazy peer would have to finish.
    return t.reshape(-1)[0].item()


def workloads():
    """name -> a function running the workload once (names as in cpu_bench.cpp)."""
    g = torch.Generator().manual_seed(0)

    def rand(*shape):
        return torch.rand(*shape, generator=g) * 2 - 1

    x16, y16 = rand(16), rand(16)
    x, y, z = rand(LARGE, LARGE), rand(LARGE, LARGE), rand(LARGE, LARGE)
    conv_x, conv_w = rand(16, 64, 56, 56), rand(64, 64, 3, 3)
    return {
        # Read-free dispatch, as in the C++ small_add.
        "small_add": lambda: x16 + y16,
        "add_large": lambda: read_one(x + y),
        "chain8_large": lambda: read_one(chain8(x, y, z)),
        "fma_exp_large": lambda: read_one(fma_exp(x, y, z)),
        "conv2d": lambda: read_one(F.conv2d(conv_x, conv_w, padding=1)),
        "softmax_large": lambda: read_one(torch.softmax(x, dim=-1)),
    }


def measure(fn, repeats, min_time):
    fn()  # warm-up (allocator, thread pool)
    timer = timeit.Timer(fn)
    number, elapsed = 1, 0.0
    while True:  # grow the inner loop until one repeat takes about min_time
        elapsed = timer.timeit(number)
        if elapsed >= min_time or number >= 1 << 24:
            break
        number *= 2 if elapsed <= 0 else max(2, min(10, int(min_time / elapsed) + 1))
    samples = [t / number for t in timer.repeat(repeat=repeats, number=number)]
    return {"median_s": statistics.median(samples), "repeats": repeats, "number": number}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--min-time", type=float, default=0.05)
    parser.add_argument("--filter", default="")
    parser.add_argument("--out", default="-")
    args = parser.parse_args()

    torch.set_num_threads(args.threads)
    torch.set_grad_enabled(False)
    results = {"torch_version": torch.__version__, "threads": torch.get_num_threads()}
    for name, fn in workloads().items():
        if args.filter and args.filter not in name:
            continue
        results[name] = measure(fn, args.repeats, args.min_time)
        print(f"peer_torch {name}: {results[name]['median_s'] * 1e3:.4f} ms", file=sys.stderr)
    text = json.dumps(results, indent=1)
    if args.out == "-":
        print(text)
    else:
        with open(args.out, "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
