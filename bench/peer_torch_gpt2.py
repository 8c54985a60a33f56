#!/usr/bin/env python3
"""The gpt2_step rows of bench/train_bench.cpp in PyTorch: the same GPT-2-small-shaped model (12
pre-norm causal layers via nn.TransformerEncoder, width 768, 12 heads, sequence 1024, batch 8,
vocabulary 50,304, untied head, AdamW lr 3e-4 wd 0.1), one step = forward, cross-entropy, the
loss read back, backward, AdamW; f32 and under torch.autocast(bfloat16). Prints one line per row
with the median step time of --repeats steps after two warm-up steps.
  peer_torch_gpt2.py [--device cuda] [--layers 12] [--seq 1024] [--batch 8] [--repeats 5]"""
import argparse
import statistics
import time

import torch


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    dev = torch.device(args.device)
    torch.backends.cuda.matmul.allow_tf32 = False
    width, vocab = 768, 50304
    for precision in ("f32", "bf16"):
        torch.manual_seed(1)
        layer = torch.nn.TransformerEncoderLayer(width, 12, 4 * width, dropout=0.0,
                                                 activation="gelu", batch_first=True,
                                                 norm_first=True)
        model = torch.nn.ModuleDict({
            "tokens": torch.nn.Embedding(vocab, width),
            "positions": torch.nn.Embedding(args.seq, width),
            "blocks": torch.nn.TransformerEncoder(layer, args.layers,
                                                  norm=torch.nn.LayerNorm(width),
                                                  enable_nested_tensor=False),
            "head": torch.nn.Linear(width, vocab),
        }).to(dev)
        opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1)
        ids = torch.randint(0, vocab, (args.batch, args.seq), device=dev)
        targets = torch.randint(0, vocab, (args.batch * args.seq,), device=dev)
        where = torch.arange(args.seq, device=dev).unsqueeze(0)
        mask = torch.nn.Transformer.generate_square_subsequent_mask(args.seq, device=dev)

        def step():
            with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=precision == "bf16"):
                h = model["tokens"](ids) + model["positions"](where)
                h = model["blocks"](h, mask=mask, is_causal=True)
                logits = model["head"](h).reshape(-1, vocab)
            loss = torch.nn.functional.cross_entropy(logits.float(), targets)
            value = loss.item()
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            return value

        for _ in range(2):
            step()
        times = []
        for _ in range(args.repeats):
            if dev.type == "cuda":
                torch.cuda.synchronize()
            start = time.perf_counter()
            step()
            if dev.type == "cuda":
                torch.cuda.synchronize()
            times.append(time.perf_counter() - start)
        print(f"torch gpt2_step/{precision}: median {statistics.median(times) * 1e3:.1f} ms "
              f"(min {min(times) * 1e3:.1f}, {args.repeats} steps; torch {torch.__version__})",
              flush=True)
        del model, opt


if __name__ == "__main__":
    main()
