#!/usr/bin/env python3
"""torch's side of bench/probe/bert_kernels.sh: the kernels of one BERT forward on cuda, from
torch's profiler, summed by name (bench/peer_torch_transformer.py's model and inputs), and the
forward's time over 10 runs.
  python3 bench/probe/torch_bert_kernels.py minilm|base [BATCH]     (the GPU machine)
"""
import os
import sys

import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from peer_torch_transformer import Bert, batch_inputs  # noqa: E402

which = sys.argv[1] if len(sys.argv) > 1 else "minilm"
batch = int(sys.argv[2]) if len(sys.argv) > 2 else 64
model = (Bert(384, 6, 1536) if which == "minilm" else Bert(768, 12, 3072)).eval().to("cuda")
ids, mask = (t.to("cuda") for t in batch_inputs(batch))
with torch.no_grad():
    for _ in range(3):
        model(ids, mask)
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(10):
        model(ids, mask)
    end.record()
    torch.cuda.synchronize()
    print(f"torch forward: {start.elapsed_time(end) / 10:.3f} ms")
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        model(ids, mask)
        torch.cuda.synchronize()
print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=25, max_name_column_width=90))
