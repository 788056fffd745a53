#!/usr/bin/python3
"""make_fixtures.py: safetensors files for tests/datasets/test_safetensors.c, written without
strix by an independent writer (json + struct, laid out as Hugging Face's writer lays them out:
tensors sorted by dtype alignment then name, data in that order, the header padded with spaces
to a multiple of 8 bytes), with values converted by PyTorch. Run with Debian's python3 (torch
1.13, numpy) from this folder; the files are committed.

- torch_halves.safetensors: "f16" (F16) and "bf16" (BF16) holding chosen bit patterns (zeros,
  subnormals, normals, the largest values, infinities, quiet NaNs), and "f16_as_f32",
  "bf16_as_f32" (F32): the same values converted by torch's .float().
- python_writer.safetensors: F64 and F32 tensors of ranks 0..3, an empty one, metadata with a
  non-ASCII value and an escaped quote; the values are formulas of the flat index i:
  "a.f64" (2, 3) F64: i / 4 - 1; "b.f32" (4) F32: i * 3 - 5; "c.scalar" () F32: 7.5;
  "d.empty" (0, 3) F32; "e.cube" (2, 2, 2) F32: -i / 8.
"""
import json
import struct

import numpy as np
import torch


def patterns():
    """16-bit patterns: both signs of zero, subnormals, normals, the largest, inf, quiet NaN."""
    base = [0x0000, 0x0001, 0x0002, 0x0003, 0x00ff, 0x0155, 0x03ff, 0x0400, 0x0401, 0x0555,
            0x3555, 0x3c00, 0x3c01, 0x4000, 0x4248, 0x5a5a, 0x7bff, 0x7c00, 0x7e00, 0x7e01,
            0x7f7f, 0x7f80, 0x7fc0, 0x0080, 0x007f, 0x3f80, 0x4049, 0x1234, 0x2bcd, 0x6789]
    out = []
    for b in base + list(range(0x0011, 0x7c00, 0x0137)):
        out += [b, b | 0x8000]
    return out


def write(path, tensors, metadata):
    """tensors: {name: (dtype, shape, bytes)}. Laid out as Hugging Face's writer does."""
    align = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2}
    names = sorted(tensors, key=lambda n: (-align[tensors[n][0]], n))
    header, data = {}, b""
    if metadata:
        header["__metadata__"] = metadata
    for n in names:
        dtype, shape, raw = tensors[n]
        header[n] = {"dtype": dtype, "shape": list(shape),
                     "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    text = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + data)


def halves():
    bits = np.array(patterns(), dtype=np.uint16)
    f16 = torch.from_numpy(bits.view(np.int16).copy()).view(torch.float16)
    bf16 = torch.from_numpy(bits.view(np.int16).copy()).view(torch.bfloat16)
    as32 = lambda t: t.float().numpy().astype("<f4").tobytes()
    n = (len(bits),)
    write("torch_halves.safetensors", {
        "f16": ("F16", n, bits.astype("<u2").tobytes()),
        "bf16": ("BF16", n, bits.astype("<u2").tobytes()),
        "f16_as_f32": ("F32", n, as32(f16)),
        "bf16_as_f32": ("F32", n, as32(bf16)),
    }, {"format": "pt"})


def formulas():
    i6, i4, i8 = np.arange(6), np.arange(4), np.arange(8)
    write("python_writer.safetensors", {
        "a.f64": ("F64", (2, 3), (i6 / 4 - 1).astype("<f8").tobytes()),
        "b.f32": ("F32", (4,), (i4 * 3 - 5).astype("<f4").tobytes()),
        "c.scalar": ("F32", (), np.array(7.5, dtype="<f4").tobytes()),
        "d.empty": ("F32", (0, 3), b""),
        "e.cube": ("F32", (2, 2, 2), (-i8 / 8).astype("<f4").tobytes()),
    }, {"format": "pt", "note": "caf\u00e9 \"quoted\"\n"})


halves()
formulas()
