#!/usr/bin/env python3
"""The PyTorch half of the kiln <-> torch interchange test (run by torch_interop.cpp).

    torch_interop.py WORK_DIR

Reads WORK_DIR/kiln_model.safetensors, inputs.safetensors and kiln_outputs.safetensors written
by kiln; loads kiln's state dict into the equivalent torch modules with strict=True and checks
kiln's outputs (float64). Then writes torch_model.safetensors (a torch-initialised float32 model
whose batch norms ran a few training batches) and torch_outputs.safetensors (its outputs for the
same inputs, and the effect of one more training batch on the cumulative-average batch norm),
which kiln loads in turn. Exits non-zero on any mismatch.

The safetensors format is read and written here by hand (8-byte little-endian header length,
JSON header, raw little-endian bytes), so the check needs nothing but torch.
"""
import json
import pathlib
import struct
import sys

import torch
from torch import nn

DTYPES = {"F64": torch.float64, "F32": torch.float32, "I64": torch.int64, "BOOL": torch.bool}
NAMES = {v: k for k, v in DTYPES.items()}


def read_safetensors(path):
    data = pathlib.Path(path).read_bytes()
    (length,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + length])
    header.pop("__metadata__", None)
    base = 8 + length
    out = {}
    for name, entry in header.items():
        begin, end = entry["data_offsets"]
        raw = bytearray(data[base + begin:base + end])  # frombuffer wants a writable buffer
        out[name] = torch.frombuffer(raw, dtype=DTYPES[entry["dtype"]]).reshape(entry["shape"])
    return out


def write_safetensors(path, tensors):
    header, blobs, offset = {}, [], 0
    for name in sorted(tensors):
        t = tensors[name].detach().contiguous().cpu()
        raw = t.numpy().tobytes()
        header[name] = {"dtype": NAMES[t.dtype], "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)  # the reference pads the header to 8 bytes
    pathlib.Path(path).write_bytes(struct.pack("<Q", len(text)) + text + b"".join(blobs))


class Model(nn.Module):
    """Attribute for attribute the Model of torch_interop.cpp."""

    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(6, 5)
        self.conv = nn.Conv2d(2, 3, 3, padding=1)
        self.bn = nn.BatchNorm2d(3)
        self.bn_cma = nn.BatchNorm1d(3, momentum=None)
        self.norm = nn.LayerNorm(5)
        self.embedding = nn.Embedding(10, 4)
        self.lstm = nn.LSTM(3, 4, num_layers=2, batch_first=True, bidirectional=True)
        self.gru = nn.GRU(3, 4, num_layers=2, bidirectional=True)
        self.attention = nn.MultiheadAttention(8, 2, batch_first=True)
        self.encoder_layer = nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True)
        layer = nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, activation="gelu",
                                           batch_first=True, norm_first=True)
        self.encoder = nn.TransformerEncoder(layer, 2, norm=nn.LayerNorm(8),
                                             enable_nested_tensor=False)
        self.head = nn.Sequential(nn.Conv1d(3, 4, 3, padding=1), nn.GroupNorm(2, 4), nn.ReLU())
        self.deconv = nn.ConvTranspose2d(3, 2, 3, stride=2, padding=1, output_padding=1)

    def run(self, inputs, dtype):
        x = {k: (v.to(dtype) if v.is_floating_point() else v) for k, v in inputs.items()}
        out = {}
        out["linear"] = self.linear(x["linear"])
        out["conv_bn"] = self.bn(self.conv(x["conv_bn"]))
        out["bn_cma"] = self.bn_cma(x["bn_cma"])
        out["norm"] = self.norm(x["norm"])
        out["embedding"] = self.embedding(x["embedding"])
        y, (h, c) = self.lstm(x["lstm"], (x["lstm.h0"], x["lstm.c0"]))
        out["lstm.output"], out["lstm.h"], out["lstm.c"] = y, h, c
        y, h = self.gru(x["gru"])
        out["gru.output"], out["gru.h"] = y, h
        a = x["attention"]
        out["attention"] = self.attention(a, a, a, need_weights=False,
                                          key_padding_mask=x["attention.key_padding_mask"])[0]
        out["encoder_layer"] = self.encoder_layer(x["encoder_layer"])
        steps = x["encoder"].shape[1]
        causal = torch.triu(torch.ones(steps, steps, dtype=torch.bool), diagonal=1)
        out["encoder"] = self.encoder(x["encoder"], mask=causal)
        out["head"] = self.head(x["head"])
        out["deconv"] = self.deconv(x["deconv"])
        return out


def compare(what, got, want, tolerance):
    if got.shape != want.shape:
        print(f"FAIL {what}: shape {list(got.shape)} but kiln has {list(want.shape)}")
        return False
    worst = ((got.double() - want.double()).abs() / (1 + want.double().abs())).max().item()
    ok = worst <= tolerance
    print(f"{'ok  ' if ok else 'FAIL'} {what}: max relative error {worst:.3g} (tolerance {tolerance})")
    return ok


def main():
    work = pathlib.Path(sys.argv[1])
    torch.set_num_threads(1)
    inputs = read_safetensors(work / "inputs.safetensors")
    ok = True

    # kiln -> torch: strict load of kiln's names, shapes and dtypes (num_batches_tracked too).
    model = Model().double()
    state = read_safetensors(work / "kiln_model.safetensors")
    model.load_state_dict(state, strict=True)
    for name in ("bn", "bn_cma"):
        count = getattr(model, name).num_batches_tracked
        print(f"kiln's {name}.num_batches_tracked: {count.item()} {count.dtype} {list(count.shape)}")
        ok &= count.dtype == torch.int64 and count.shape == () and count.item() == 3
    model.eval()
    kiln_outputs = read_safetensors(work / "kiln_outputs.safetensors")
    with torch.no_grad():
        torch_outputs = model.run(inputs, torch.float64)
    for name, want in sorted(kiln_outputs.items()):
        ok &= compare("kiln -> torch " + name, torch_outputs[name], want, 1e-10)

    # torch -> kiln: a torch-initialised float32 model whose batch norms saw training batches.
    torch.manual_seed(0)
    model = Model()
    model.train()
    with torch.no_grad():
        for k in range(2):
            model.bn(model.conv(torch.randn(4, 2, 5, 5) * 2 + k))
        for k in range(3):
            model.bn_cma(torch.randn(6, 3) * (k + 1) - k)
    model.eval()
    write_safetensors(work / "torch_model.safetensors", model.state_dict())
    with torch.no_grad():
        outputs = model.run(inputs, torch.float32)
        bn = model.bn_cma
        outputs["bn_cma_step.num_batches_tracked_before"] = bn.num_batches_tracked.clone()
        bn.train()
        bn(inputs["bn_cma_step"].float())
        outputs["bn_cma_step.running_mean"] = bn.running_mean
        outputs["bn_cma_step.running_var"] = bn.running_var
        outputs["bn_cma_step.num_batches_tracked"] = bn.num_batches_tracked
    write_safetensors(work / "torch_outputs.safetensors", outputs)
    print("wrote torch_model.safetensors and torch_outputs.safetensors")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
