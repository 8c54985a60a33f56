#!/usr/bin/python3
"""PyTorch CPU peer for bench/cpu_bench.cpp and bench/autodiff_bench.cpp: the same workloads
(DESIGN.md §8), timed with timeit, median of many repeats. Prints JSON:
{"workload": {"median_s": ..., "repeats": ...}}.

Run with Debian's interpreter (/usr/bin/python3 with python3-torch); bench/run_all.sh does.
  /usr/bin/python3 bench/peer_torch.py --threads 2 [--repeats 15] [--out peer.json]
"""
import argparse
import json
import re
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


MLP_SIZES = (784, 512, 512, 10)
LEARNING_RATE = 0.01


def mlp_model(batch, g, device="cpu"):
    """autodiff_bench's MLP and batch on device: (params, step), step() an SGD step returning
    the loss tensor (no read)."""
    params = []
    for fan_in, fan_out in zip(MLP_SIZES, MLP_SIZES[1:]):
        bound = 1 / fan_in ** 0.5
        params.append(((torch.rand(fan_in, fan_out, generator=g) * 2 - 1) * bound).to(device).requires_grad_())
        params.append(((torch.rand(1, fan_out, generator=g) * 2 - 1) * bound).to(device).requires_grad_())
    x = (torch.rand(batch, MLP_SIZES[0], generator=g) - 0.5).to(device)
    labels = torch.randint(0, MLP_SIZES[-1], (batch,), generator=g).to(device)

    def step():
        with torch.enable_grad():
            w1, b1, w2, b2, w3, b3 = params
            h = torch.relu(x @ w1 + b1)
            h = torch.relu(h @ w2 + b2)
            loss = F.cross_entropy(h @ w3 + b3, labels)
            grads = torch.autograd.grad(loss, params)
        with torch.no_grad():
            for p, d in zip(params, grads):
                p.sub_(d, alpha=LEARNING_RATE)
        return loss.detach()

    return params, step


def mlp_step(batch, g):
    """One SGD step of autodiff_bench's mlp_step: forward, backward, update, loss read back."""
    _, step = mlp_model(batch, g)
    return lambda: step().item()


def digits_epoch(g):
    """One epoch of train_bench's digits_epoch: the same network, AdamW, batch 32, shuffled."""
    import os
    import numpy as np
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "digits", "digits.csv")
    table = np.loadtxt(path, delimiter=",", dtype=np.float32)
    pixels = torch.from_numpy(table[:, :64] / 16.0)
    labels = torch.from_numpy(table[:, 64].astype(np.int64))
    model = torch.nn.Sequential(
        torch.nn.Unflatten(1, (1, 8, 8)),
        torch.nn.Conv2d(1, 16, 3, padding=1), torch.nn.ReLU(),
        torch.nn.Conv2d(16, 32, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Flatten(), torch.nn.Linear(512, 128), torch.nn.ReLU(), torch.nn.Dropout(0.25),
        torch.nn.Linear(128, 10))
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=1e-4)

    def epoch():
        order = torch.randperm(len(labels), generator=g)
        total = 0.0
        with torch.enable_grad():
            for start in range(0, len(order), 32):
                take = order[start:start + 32]
                loss = F.cross_entropy(model(pixels[take]), labels[take])
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                optimizer.step()
                total += loss.item()
        return total

    return epoch


def small_add_tracked(g):
    x = (torch.rand(16, generator=g) * 2 - 1).requires_grad_()
    y = torch.rand(16, generator=g) * 2 - 1

    def add():
        with torch.enable_grad():  # records the graph node, freed with the result
            return x + y

    return add


def workloads():
    """name -> a function running the workload once (names as in cpu_bench.cpp)."""
    g = torch.Generator().manual_seed(0)

    def rand(*shape):
        return torch.rand(*shape, generator=g) * 2 - 1

    x16, y16 = rand(16), rand(16)
    a_bf16, b_bf16 = rand(1024, 1024).bfloat16(), rand(1024, 1024).bfloat16()
    x, y, z = rand(LARGE, LARGE), rand(LARGE, LARGE), rand(LARGE, LARGE)
    conv_x, conv_w, conv_g = rand(16, 64, 56, 56), rand(64, 64, 3, 3), rand(16, 64, 56, 56)
    return {
        # Read-free dispatch, as in the C++ small_add.
        "small_add": lambda: x16 + y16,
        "add_large": lambda: read_one(x + y),
        "matmul_bf16/1024": lambda: read_one(a_bf16 @ b_bf16),
        "chain8_large": lambda: read_one(chain8(x, y, z)),
        "fma_exp_large": lambda: read_one(fma_exp(x, y, z)),
        "conv2d": lambda: read_one(F.conv2d(conv_x, conv_w, padding=1)),
        # The gradients alone, as the backward of a convolution computes them.
        "conv2d_x_backward": lambda: read_one(
            torch.nn.grad.conv2d_input(conv_x.shape, conv_w, conv_g, padding=1)
        ),
        "conv2d_weight_backward": lambda: read_one(
            torch.nn.grad.conv2d_weight(conv_x, conv_w.shape, conv_g, padding=1)
        ),
        "softmax_large": lambda: read_one(torch.softmax(x, dim=-1)),
        # cpu_bench's dropout rows: torch's own dropout (a bernoulli mask, scaled), and the same
        # chain as kiln's mask_fill row written out op by op.
        "dropout_large": lambda: read_one(F.dropout(x, p=0.1, training=True)),
        "dropout_mask_fill_large": lambda: read_one(
            x.masked_fill(torch.rand(x.shape, generator=g) < 0.1, 0.0) / 0.9
        ),
        # torch's own normal draw (its generator, not kiln's stream), as a model's init makes it.
        "random_normal_large": lambda: read_one(
            torch.empty(LARGE, LARGE).normal_(0.5, 2.0, generator=g)
        ),
        # autodiff_bench
        "small_add_tracked": small_add_tracked(g),
        "mlp_step/128": mlp_step(128, g),
        "mlp_step/4096": mlp_step(4096, g),
        "digits_epoch": digits_epoch(g),
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


def arguments():
    """The options every CPU peer script takes (a caller may add its own before parsing)."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--min-time", type=float, default=0.05)
    parser.add_argument("--filter", default="")
    parser.add_argument("--out", default="-")
    return parser


def main():
    args = arguments().parse_args()
    torch.set_num_threads(args.threads)
    torch.set_grad_enabled(False)
    run_and_write(workloads(), args)


def run_and_write(rows, args):
    """Times each workload whose name matches args.filter and writes the JSON to args.out. A
    workload given as ("once", fn) times itself: fn() returns its result (with median_s)."""
    results = {"torch_version": torch.__version__, "threads": torch.get_num_threads()}
    for name, fn in rows.items():
        if args.filter and not re.search(args.filter, name):
            continue
        if isinstance(fn, tuple):
            results[name] = fn[1]()
        else:
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
