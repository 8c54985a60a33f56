#!/usr/bin/env python3
"""Writes GGUF files with the `gguf` package (llama.cpp's Python writer) for
gguf_interop_test.cpp, with the package's own dequantization of each quantized tensor beside
them: <name>.f32 (float32 values) and, for the kinds the package quantizes, <name>.src (the
float32 values it quantized). Usage: gguf_interop.py OUT_DIR"""
import sys

import numpy as np
import gguf
from gguf import GGMLQuantizationType as T

out = sys.argv[1]
rng = np.random.default_rng(20)
w = gguf.GGUFWriter(f"{out}/interop.gguf", arch="interop")
w.add_uint8("m.u8", 250)
w.add_int8("m.i8", -128)
w.add_uint16("m.u16", 65535)
w.add_int16("m.i16", -32768)
w.add_uint32("m.u32", 4294967295)
w.add_int32("m.i32", -2147483648)
w.add_float32("m.f32", 0.1)
w.add_bool("m.bool", False)
w.add_string("m.str", "héllo")
w.add_uint64("m.u64", 18446744073709551615)
w.add_int64("m.i64", -9223372036854775808)
w.add_float64("m.f64", 0.1)
w.add_array("m.ints", [1, -2, 3])
w.add_array("m.strs", ["x", "yz", ""])
w.add_array("m.nested", [[1.5, 2.5], ["a"]])

# The kinds the package quantizes: random normal values, several rows, scaled apart.
for t in (T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1, T.Q8_0):
    src = (rng.standard_normal((3, 96)) * np.array([[1.0], [1e-3], [250.0]])).astype(np.float32)
    q = gguf.quants.quantize(src, t)
    w.add_tensor(t.name, q, raw_dtype=t)
    src.tofile(f"{out}/{t.name}.src")
    gguf.quants.dequantize(q, t).astype(np.float32).tofile(f"{out}/{t.name}.f32")

# The k-quants, which the package only decodes: random blocks with finite f16 scales.
scale_fields = {T.Q2_K: (80, 82), T.Q3_K: (108,), T.Q4_K: (0, 2), T.Q5_K: (0, 2), T.Q6_K: (208,)}
for t, fields in scale_fields.items():
    size = gguf.GGML_QUANT_SIZES[t][1]
    blocks = rng.integers(0, 256, (4, size), dtype=np.uint8)
    for at in fields:
        scales = rng.standard_normal(4).astype(np.float16).view(np.uint8).reshape(4, 2)
        blocks[:, at:at + 2] = scales
    q = blocks.reshape(2, 2 * size)  # 2 rows of 2 blocks: shape [2, 512]
    w.add_tensor(t.name, q, raw_dtype=t)
    gguf.quants.dequantize(q, t).astype(np.float32).tofile(f"{out}/{t.name}.f32")

w.add_tensor("plain.f32", np.arange(24, dtype=np.float32).reshape(2, 3, 4))
w.add_tensor("plain.f16", np.linspace(-1, 1, 6, dtype=np.float16).reshape(3, 2))
w.add_tensor("plain.i32", np.array([[-5, 6]], dtype=np.int32))

w.write_header_to_file()
w.write_kv_data_to_file()
w.write_tensors_to_file()
w.close()
