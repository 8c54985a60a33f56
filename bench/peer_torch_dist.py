"""PyTorch's all_reduce over Gloo on the CPU, the peer of bench/dist_bench.cpp: 1, 16 and 256 MiB
of f32 summed across 2 processes (torch.multiprocessing, a file rendezvous), the median of the
iterations after a warm-up, reported as nccl-tests does (algbw = bytes / time, busbw = algbw *
2 (n - 1) / n).

    python3 bench/peer_torch_dist.py [RANKS]
"""
import os
import statistics
import sys
import tempfile
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

SIZES_MIB = (1, 16, 256)


def run(rank, size, store, results):
    torch.set_num_threads(max(1, os.cpu_count() // size))
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=size)
    for mib in SIZES_MIB:
        x = torch.full((mib * (1 << 20) // 4,), float(rank + 1))
        dist.all_reduce(x)
        assert x[0].item() == size * (size + 1) / 2
        times = []
        for _ in range(5 if mib == 256 else 20):
            dist.barrier()
            start = time.perf_counter()
            dist.all_reduce(x)
            times.append(time.perf_counter() - start)
        if rank == 0:
            results[mib] = statistics.median(times)
    dist.destroy_process_group()


def main():
    size = int(sys.argv[1]) if len(sys.argv) > 1 else 2
    with tempfile.TemporaryDirectory() as directory:
        results = mp.Manager().dict()
        mp.spawn(run, args=(size, os.path.join(directory, "store"), results), nprocs=size)
    print(f"torch {torch.__version__} all_reduce over gloo, {size} processes")
    for mib in SIZES_MIB:
        seconds = results[mib]
        algbw = mib / seconds
        print(f"all_reduce_f32/{mib} MiB: {seconds * 1e3:.1f} ms, algbw {algbw:.0f} MiB/s, "
              f"busbw {algbw * 2 * (size - 1) / size:.0f} MiB/s")


if __name__ == "__main__":
    main()
