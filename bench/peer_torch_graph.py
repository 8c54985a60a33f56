"""The torch peer of autodiff_bench's mlp_step and mlp_step_captured on a GPU: one SGD step of the
784-512-512-10 ReLU MLP (cross entropy, loss read back), eager and replayed from a CUDA graph
(torch.cuda.graph, the documented whole-network capture). Prints one line per row:
  mlp_step/<batch> eager <median ms>   and   mlp_step_captured/<batch> graph <median ms>
Usage: python3 bench/peer_torch_graph.py [repeats]"""
import statistics
import sys
import time

import torch

from peer_torch import mlp_model

def make(batch, device):
    return mlp_model(batch, torch.Generator().manual_seed(0), device)[1]


def median_ms(run, repeats, iters):
    for _ in range(3):
        run()
    times = []
    for _ in range(repeats):
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(iters):
            run()
        times.append((time.perf_counter() - start) / iters * 1e3)
    return statistics.median(times)


def main():
    repeats = int(sys.argv[1]) if len(sys.argv) > 1 else 7
    device = torch.device("cuda")
    for batch in (128, 4096):
        step = make(batch, device)
        eager = median_ms(lambda: step().item(), repeats, 50)
        print(f"mlp_step/{batch} eager {eager:.4f} ms", flush=True)
        # Warm up on a side stream, then capture (the pattern torch's documentation gives).
        step = make(batch, device)
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):
                step()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            static_loss = step()

        def replay():
            graph.replay()
            return static_loss.item()

        captured = median_ms(replay, repeats, 50)
        print(f"mlp_step_captured/{batch} graph {captured:.4f} ms", flush=True)


if __name__ == "__main__":
    main()
