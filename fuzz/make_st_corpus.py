#!/usr/bin/env python3
"""make_st_corpus.py: the seed corpora of fuzz_safetensors (corpus_safetensors/) and fuzz_llmc
(corpus_llmc/), run by make_corpus.sh from fuzz/. Deterministic; plain Python (struct, json).

corpus_safetensors/: the test fixtures (tests/datasets/safetensors, an independent writer's
files with PyTorch's F16/BF16 conversions), small files of every dtype strix reads, with and
without metadata, and hostile headers (a duplicate name, overlapping offsets, a gap, a header
longer than the file, an integer dtype, escapes, a rank of 9), and a tiny GPT-2 under Hugging
Face's names (hf_gpt2_tiny) for sx_ds_llmc_from_hf.
corpus_llmc/: llm.c checkpoints of a tiny config (L=2, C=8, NH=2, V=11, Vp=16, maxT=5) in f32
(version 3) and bf16 (version 5), and headers that lie (a short file, GPT-2 124M's config over a
tiny file, an overflowing config).
"""
import json
import os
import shutil
import struct


def st(path, tensors, meta=None, pad=True, raw_header=None, extra=b""):
    """tensors: [(name, dtype, shape, bytes)] laid out in order."""
    header, data = {}, b""
    if meta is not None:
        header["__metadata__"] = meta
    for name, dtype, shape, raw in tensors:
        header[name] = {"dtype": dtype, "shape": shape,
                        "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    text = raw_header if raw_header is not None else json.dumps(header).encode()
    if pad:
        text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + data + extra)


def f32(*v):
    return struct.pack("<%df" % len(v), *v)


def safetensors_corpus():
    d = "corpus_safetensors"
    shutil.rmtree(d, ignore_errors=True)
    os.mkdir(d)
    for f in ("python_writer.safetensors", "torch_halves.safetensors"):
        shutil.copy(os.path.join("..", "tests", "datasets", "safetensors", f), d)
    st(d + "/f32_meta", [("w", "F32", [2, 2], f32(1, 2, 3, 4)), ("b", "F32", [2], f32(5, 6))],
       {"format": "pt", "k": "v\u00e9"})
    st(d + "/f64_scalar", [("s", "F64", [], struct.pack("<d", 2.5))])
    st(d + "/f16_bf16", [("h", "F16", [3], struct.pack("<3H", 0x3c00, 0x8001, 0x7e00)),
                         ("b", "BF16", [1, 2], struct.pack("<2H", 0x3f80, 0xff80))])
    st(d + "/empty_tensor", [("e", "F32", [0, 4], b""), ("x", "F32", [1], f32(1))])
    st(d + "/empty_set", [])
    st(d + "/bad_i64", [("ids", "I64", [2], struct.pack("<2q", 1, 2))])
    st(d + "/bad_rank9", [("r", "F32", [1] * 9, f32(1))])
    st(d + "/bad_duplicate", [], raw_header=b'{"a":{"dtype":"F32","shape":[1],"data_offsets":'
       b'[0,4]},"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}', extra=f32(1, 2))
    st(d + "/bad_overlap", [], raw_header=b'{"a":{"dtype":"F32","shape":[2],"data_offsets":'
       b'[0,8]},"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}', extra=f32(1, 2))
    st(d + "/bad_gap", [("a", "F32", [1], f32(1))], extra=b"\0\0\0\0")
    st(d + "/escapes", [], raw_header=b'{"\\u00e9\\ud83d\\ude00\\n":{"dtype":"F32",'
       b'"shape":[1],"data_offsets":[0,4]},"__metadata__":{"\\"":"\\\\"}}', extra=f32(1))
    # Hugging Face's GPT-2 names and (in, out) Conv1D layouts, L=1, C=4, V=3, maxT=2
    C, hf = 4, []
    shapes = [("wte.weight", [3, C]), ("wpe.weight", [2, C]), ("h.0.ln_1.weight", [C]),
              ("h.0.ln_1.bias", [C]), ("h.0.attn.c_attn.weight", [C, 3 * C]),
              ("h.0.attn.c_attn.bias", [3 * C]), ("h.0.attn.c_proj.weight", [C, C]),
              ("h.0.attn.c_proj.bias", [C]), ("h.0.ln_2.weight", [C]), ("h.0.ln_2.bias", [C]),
              ("h.0.mlp.c_fc.weight", [C, 4 * C]), ("h.0.mlp.c_fc.bias", [4 * C]),
              ("h.0.mlp.c_proj.weight", [4 * C, C]), ("h.0.mlp.c_proj.bias", [C]),
              ("ln_f.weight", [C]), ("ln_f.bias", [C])]
    for name, shape in shapes:
        n = 1
        for x in shape:
            n *= x
        hf.append((name, "F32", shape, f32(*[(i % 7) / 8 for i in range(n)])))
    st(d + "/hf_gpt2_tiny", hf, {"format": "pt"})
    with open(d + "/bad_header_length", "wb") as f:
        f.write(struct.pack("<Q", 1 << 40) + b'{"a":{}}')


def llmc(path, version, cfg, values=None, cut=0, extra=b""):
    maxT, V, L, NH, C, Vp = cfg
    n = (Vp * C + maxT * C + L * (C + C + 3 * C * C + 3 * C + C * C + C + C + C + 4 * C * C
         + 4 * C + 4 * C * C + C) + 2 * C) if values is None else values
    head = struct.pack("<8i", 20240326, version, maxT, V, L, NH, C, Vp) + b"\0" * (1024 - 32)
    if version == 3:
        body = b"".join(struct.pack("<f", ((i * 5) % 251 - 125) / 4) for i in range(n))
    else:
        body = b"".join(struct.pack("<f", ((i * 5) % 251 - 125) / 4)[2:] for i in range(n))
    data = head + body + extra
    with open(path, "wb") as f:
        f.write(data[:len(data) - cut])


def llmc_corpus():
    d = "corpus_llmc"
    shutil.rmtree(d, ignore_errors=True)
    os.mkdir(d)
    tiny = (5, 11, 2, 2, 8, 16)
    llmc(d + "/tiny_f32.bin", 3, tiny)
    llmc(d + "/tiny_bf16.bin", 5, tiny)
    llmc(d + "/one_layer_f32.bin", 3, (2, 3, 1, 1, 4, 4))
    llmc(d + "/bad_short.bin", 3, tiny, cut=4)
    llmc(d + "/bad_trailing.bin", 3, tiny, extra=b"\0\0\0\0")
    llmc(d + "/bad_124M_header.bin", 3, (1024, 50257, 12, 12, 768, 50304), values=100)
    llmc(d + "/bad_overflow.bin", 3, (1, 1, 2147483647, 1, 2147483647, 1), values=4)
    llmc(d + "/bad_heads.bin", 3, (5, 11, 2, 3, 8, 16), values=4)


safetensors_corpus()
llmc_corpus()
