"""PyTorch's all_reduce over NCCL between GPUs, the peer of bench/dist_bench.cpp's cuda rows
(KILN_BENCH_DEVICE=cuda): 1, 16 and 256 MiB of f32 summed across one process per GPU
(torch.multiprocessing, a file rendezvous), timed as nccl-tests does: ITERATIONS calls queued one
after the other, then one synchronisation; the median of REPEATS such runs after a warm-up,
reported as algbw = bytes / time and busbw = algbw * 2 (n - 1) / n. One JSON line per size on
stdout (seconds per call, algbw and busbw in bytes per second), a readable line on stderr.

    python3 bench/peer_torch_nccl.py [RANKS]      # default: 2, on cuda:0 and cuda:1
"""
import json
import os
import statistics
import sys
import tempfile
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

SIZES_MIB = (1, 16, 256)
ITERATIONS = 10
REPEATS = {1: 50, 16: 50, 256: 5}


def run(rank, size, store, results):
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", init_method=f"file://{store}", rank=rank, world_size=size,
                            device_id=torch.device("cuda", rank))
    for mib in SIZES_MIB:
        x = torch.full((mib * (1 << 20) // 4,), float(rank + 1), device="cuda")
        y = x.clone()
        dist.all_reduce(y)
        assert y[0].item() == size * (size + 1) / 2
        for _ in range(ITERATIONS):  # warm
            dist.all_reduce(y)
        torch.cuda.synchronize()
        times = []
        for _ in range(REPEATS[mib]):
            dist.barrier()
            torch.cuda.synchronize()
            start = time.perf_counter()
            for _ in range(ITERATIONS):
                dist.all_reduce(y)
            torch.cuda.synchronize()
            times.append((time.perf_counter() - start) / ITERATIONS)
        if rank == 0:
            results[mib] = statistics.median(times)
    dist.destroy_process_group()


def main():
    size = int(sys.argv[1]) if len(sys.argv) > 1 else 2
    if torch.cuda.device_count() < size:
        sys.exit(f"peer_torch_nccl: {size} ranks need {size} GPUs, "
                 f"found {torch.cuda.device_count()}")
    with tempfile.TemporaryDirectory() as directory:
        results = mp.Manager().dict()
        mp.spawn(run, args=(size, os.path.join(directory, "store"), results), nprocs=size)
    version = torch.cuda.nccl.version()
    nccl = ".".join(map(str, version)) if isinstance(version, tuple) else str(version)
    print(f"torch {torch.__version__} (NCCL {nccl}) all_reduce over nccl, {size} processes",
          file=sys.stderr)
    for mib in SIZES_MIB:
        seconds = results[mib]
        algbw = mib * (1 << 20) / seconds
        busbw = algbw * 2 * (size - 1) / size
        print(json.dumps({"name": f"all_reduce_f32/{mib}", "mib": mib, "seconds": seconds,
                          "algbw": algbw, "busbw": busbw, "ranks": size, "torch": torch.__version__,
                          "nccl": nccl}))
        print(f"all_reduce_f32/{mib} MiB: {seconds * 1e3:.3f} ms, busbw {busbw / 1e9:.1f} GB/s",
              file=sys.stderr)


if __name__ == "__main__":
    main()
