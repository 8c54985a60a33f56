#!/usr/bin/env python3
"""PyTorch's side of bench/transformer_bench.cpp: the same rows, shapes and inputs.

The BERT rows run a BERT written with torch's own modules and functions (nn.Linear, nn.Embedding,
F.layer_norm, F.gelu and F.scaled_dot_product_attention where torch has it, the matmul-softmax
form otherwise), in eval mode without gradients: what transformers' BertModel runs. The
contention row spins a second process on a core while it times the MiniLM forward.
  python3 bench/peer_torch_transformer.py [--threads 2] [--repeats 15] [--out FILE]
      [--device cuda --bert-batch 64]   (the GPU machine: the BERT rows only)
"""
import math
import multiprocessing
import os
import statistics
import time

import torch
import torch.nn.functional as F
from torch import nn

# The same timing and read-back as the CPU peer (bench/peer_torch.py, beside this file).
from peer_torch import arguments, read_one, run_and_write

LARGE = 4096
BATCH, HEADS, TOKENS = 8, 12, 128


class Layer(nn.Module):
    def __init__(self, hidden, intermediate):
        super().__init__()
        self.q, self.k, self.v, self.o = (nn.Linear(hidden, hidden) for _ in range(4))
        self.ln1, self.ln2 = nn.LayerNorm(hidden, eps=1e-12), nn.LayerNorm(hidden, eps=1e-12)
        self.up, self.down = nn.Linear(hidden, intermediate), nn.Linear(intermediate, hidden)

    def forward(self, x, additive_mask):
        b, s, h = x.shape

        def heads(t):
            return t.view(b, s, HEADS, h // HEADS).transpose(1, 2)

        q, k, v = heads(self.q(x)), heads(self.k(x)), heads(self.v(x))
        if hasattr(F, "scaled_dot_product_attention"):
            ctx = F.scaled_dot_product_attention(q, k, v, attn_mask=additive_mask)
        else:
            scores = q @ k.transpose(-1, -2) / math.sqrt(h // HEADS) + additive_mask
            ctx = torch.softmax(scores, dim=-1) @ v
        x = self.ln1(self.o(ctx.transpose(1, 2).reshape(b, s, h)) + x)
        return self.ln2(self.down(F.gelu(self.up(x))) + x)


class Bert(nn.Module):
    def __init__(self, hidden, layers, intermediate, vocab=30522):
        super().__init__()
        self.words, self.positions = nn.Embedding(vocab, hidden), nn.Embedding(512, hidden)
        self.types, self.ln = nn.Embedding(2, hidden), nn.LayerNorm(hidden, eps=1e-12)
        self.layers = nn.ModuleList(Layer(hidden, intermediate) for _ in range(layers))

    def forward(self, ids, mask):
        s = ids.shape[1]
        x = self.words(ids) + self.types(torch.zeros_like(ids)) + self.positions.weight[:s]
        x = self.ln(x)
        # transformers' extended mask: 0 where attended, the dtype's lowest value on padding.
        additive = (1.0 - mask[:, None, None, :].float()) * torch.finfo(torch.float32).min
        for layer in self.layers:
            x = layer(x, additive)
        return x


def batch_inputs(batch):
    ids = torch.zeros(batch, TOKENS, dtype=torch.long)
    mask = torch.zeros(batch, TOKENS, dtype=torch.long)
    g = torch.Generator().manual_seed(1)
    for b in range(batch):
        n = TOKENS - 12 * (b % 8)
        ids[b, :n] = torch.randint(1000, 21000, (n,), generator=g)
        mask[b, :n] = 1
    return ids, mask


def spin():
    while True:
        pass


def contention(model, ids, mask):
    def once():
        start = time.perf_counter()
        read_one(model(ids, mask))
        return (time.perf_counter() - start) * 1e3

    for _ in range(2):
        once()
    quiet = statistics.median(once() for _ in range(20))
    hog = multiprocessing.Process(target=spin, daemon=True)
    hog.start()
    try:
        loaded = sorted(once() for _ in range(40))
    finally:
        hog.kill()
        hog.join()
    p95 = loaded[int(0.95 * (len(loaded) - 1) + 0.5)]
    return {"median_s": statistics.median(loaded) / 1e3, "quiet_median_ms": quiet,
            "loaded_p95_ms": p95, "p95_over_quiet": p95 / quiet}


def workloads(device, bert_batch):
    if device != "cpu":
        # Only the BERT rows, timed with a synchronize (read_one's .item()).
        ids, mask = (t.to(device) for t in batch_inputs(bert_batch))
        torch.manual_seed(1)
        base = Bert(768, 12, 3072).eval().to(device)
        minilm = Bert(384, 6, 1536).eval().to(device)
        return {"bert_forward/0": lambda: read_one(minilm(ids, mask)),
                "bert_forward/1": lambda: read_one(base(ids, mask))}
    g = torch.Generator().manual_seed(0)
    x = torch.rand(LARGE, LARGE, generator=g) * 8 - 4
    scores = torch.randn(BATCH, HEADS, TOKENS, TOKENS, generator=g) * 3
    additive = torch.zeros(1, 1, 1, TOKENS)
    additive[..., 96:] = torch.finfo(torch.float32).min
    masked = scores + additive
    q, k, v = (torch.randn(BATCH, HEADS, TOKENS, 64, generator=g) for _ in range(3))
    keys = torch.zeros(1, 1, 1, TOKENS, dtype=torch.bool)
    keys[..., 96:] = True
    hidden = torch.randn(BATCH * TOKENS, 768, generator=g) * 2
    gamma, beta = torch.rand(768, generator=g) + 0.5, torch.rand(768, generator=g) - 0.5

    def attention_op():
        if hasattr(F, "scaled_dot_product_attention"):
            return F.scaled_dot_product_attention(q, k, v, attn_mask=~keys)
        return attention_composed()

    def attention_composed():
        scores = (q @ k.transpose(-1, -2)) / 8.0
        return torch.softmax(scores.masked_fill(keys, -1e30), dim=-1) @ v

    def attention_dropout():
        if hasattr(F, "scaled_dot_product_attention"):
            return F.scaled_dot_product_attention(q, k, v, dropout_p=0.1)
        # torch before 2.0 (Debian's 1.13): the same composition, dropout on the probabilities.
        scores = (q @ k.transpose(-1, -2)) / 8.0
        return F.dropout(torch.softmax(scores, dim=-1), p=0.1) @ v

    ids, mask = batch_inputs(bert_batch)
    torch.manual_seed(1)
    minilm = Bert(384, 6, 1536).eval()
    base = Bert(768, 12, 3072).eval()
    return {
        "gelu_large": lambda: read_one(F.gelu(x)),
        "softmax_scores": lambda: read_one(torch.softmax(scores, dim=-1)),
        "softmax_scores_masked": lambda: read_one(torch.softmax(masked, dim=-1)),
        "log_softmax_scores": lambda: read_one(torch.log_softmax(scores, dim=-1)),
        "attention_op": lambda: read_one(attention_op()),
        "attention_composed": lambda: read_one(attention_composed()),
        "attention_op_dropout": lambda: read_one(attention_dropout()),
        "layer_norm_hidden": lambda: read_one(F.layer_norm(hidden, (768,), gamma, beta, 1e-12)),
        "bert_forward/0": lambda: read_one(minilm(ids, mask)),
        "bert_forward/1": lambda: read_one(base(ids, mask)),
        "bert_contention": ("once", lambda: contention(minilm, ids, mask)),
        **embed_startup(),
    }


def embed_startup(repeats=9):
    """sentence-transformers loading the model directory kiln's embed_startup row loads, as kiln's
    row does: in a forked child per load, after one load in this process (so the modules are
    imported, as in a program that loads a model, but no load's memory is reused)."""
    model = os.environ.get("KILN_BENCH_EMBED_MODEL")
    if not model:
        return {}
    try:
        from sentence_transformers import SentenceTransformer
    except ImportError:
        return {}

    def forked_loads():
        # One load here first: transformers imports most of its modules on first use, and a
        # program pays that once, not per model.
        SentenceTransformer(model, device="cpu")
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            child = os.fork()
            if child == 0:
                try:
                    SentenceTransformer(model, device="cpu")
                    os._exit(0)
                except BaseException:
                    os._exit(1)
            _, status = os.waitpid(child, 0)
            times.append(time.perf_counter() - start)
            if status != 0:
                raise RuntimeError("embed_startup: sentence-transformers did not load " + model)
        return {"median_s": statistics.median(times), "samples_s": times}

    return {"embed_startup": ("once", forked_loads)}


def main():
    parser = arguments()
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--bert-batch", type=int, default=BATCH)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.set_grad_enabled(False)
    run_and_write(workloads(args.device, args.bert_batch), args)

if __name__ == "__main__":
    main()
