#!/usr/bin/python3
"""gpt_torch.py: the GPT of examples/gpt_train.c in PyTorch (nanoGPT's layout: token and position
embeddings, pre-norm blocks of causal multi-head self-attention and a tanh-GELU MLP, a final layer
norm, an output layer tied to the token table; no dropout), for bench/compare_gpt.

Its parameters are named and laid out as strix's (x @ W with W (in, out); attention's
qkv_weight (C, 3C) with Q, K, V columns, out_weight (C, C), and biases), so one safetensors file initialises both:

  gpt_torch.py --write-init FILE --write-tokens FILE [--write-llmc FILE] [config]
                                                 random weights (also as llm.c's checkpoint) and tokens
  gpt_torch.py --init FILE --tokens FILE [config] --steps N      N AdamW steps on the tokens

The second form prints one line per step, `step K loss L ms M`, then
`result: torch_ms=MEDIAN peak_rss_mb=R` (the median step time after the first, and the process's
peak resident memory). Config: --layers L --dim C --heads H --seq T --max-len N (positions in the
table, default T) --batch B --vocab V --lr X --clip X --wd X --threads N (default: PyTorch's own).
"""
import argparse
import json
import math
import resource
import statistics
import struct
import sys
import time

import torch
import torch.nn.functional as F


def names_and_shapes(a):
    C, V, T = a.dim, a.vocab, a.max_len or a.seq
    out = [("wte.weight", (V, C)), ("wpe.weight", (T, C))]
    for i in range(a.layers):
        h = "h.%d." % i
        out += [(h + "ln_1.gamma", (C,)), (h + "ln_1.beta", (C,))]
        out += [(h + "attn.qkv_weight", (C, 3 * C)), (h + "attn.qkv_bias", (3 * C,))]
        out += [(h + "attn.out_weight", (C, C)), (h + "attn.out_bias", (C,))]
        out += [(h + "ln_2.gamma", (C,)), (h + "ln_2.beta", (C,))]
        out += [(h + "mlp.c_fc.weight", (C, 4 * C)), (h + "mlp.c_fc.bias", (4 * C,))]
        out += [(h + "mlp.c_proj.weight", (4 * C, C)), (h + "mlp.c_proj.bias", (C,))]
    out += [("ln_f.gamma", (C,)), ("ln_f.beta", (C,))]
    return out


def init_weights(a):
    """GPT-2's initialisation: N(0, 0.02) weights, zero biases, unit layer-norm gains."""
    g = torch.Generator().manual_seed(a.seed)
    w = {}
    for name, shape in names_and_shapes(a):
        if name.endswith("gamma"):
            w[name] = torch.ones(shape)
        elif name.endswith("beta") or name.endswith("bias"):
            w[name] = torch.zeros(shape)
        else:
            w[name] = torch.randn(shape, generator=g) * 0.02
    return w


def write_safetensors(path, tensors):
    header, offset, blobs = {}, 0, []
    for name, t in tensors.items():
        b = t.contiguous().to(torch.float32).numpy().tobytes()
        header[name] = {"dtype": "F32", "shape": list(t.shape), "data_offsets": [offset, offset + len(b)]}
        offset += len(b)
        blobs.append(b)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def write_llmc(path, a, w):
    """The weights as llm.c's GPT-2 checkpoint (train_gpt2.c's gpt2_build_from_checkpoint):
    256 int32 of header, then each kind's array for all layers, (out, in) weights."""
    L, C, V = a.layers, a.dim, a.vocab
    Vp = (V + 127) // 128 * 128
    maxT = w["wpe.weight"].shape[0]
    wte = torch.zeros(Vp, C)
    wte[:V] = w["wte.weight"]
    per = lambda name, t=False: torch.stack([w["h.%d.%s" % (l, name)].t() if t else w["h.%d.%s" % (l, name)]
                                             for l in range(L)])
    arrays = [wte, w["wpe.weight"], per("ln_1.gamma"), per("ln_1.beta"), per("attn.qkv_weight", True),
              per("attn.qkv_bias"), per("attn.out_weight", True), per("attn.out_bias"), per("ln_2.gamma"),
              per("ln_2.beta"), per("mlp.c_fc.weight", True), per("mlp.c_fc.bias"), per("mlp.c_proj.weight", True),
              per("mlp.c_proj.bias"), w["ln_f.gamma"], w["ln_f.beta"]]
    header = [20240326, 3, maxT, V, L, a.heads, C, Vp] + [0] * 248
    with open(path, "wb") as f:
        f.write(struct.pack("<256i", *header))
        for t in arrays:
            f.write(t.contiguous().to(torch.float32).numpy().astype("<f4").tobytes())


def read_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        lo, hi = e["data_offsets"]
        assert e["dtype"] == "F32", name
        out[name] = torch.frombuffer(bytearray(data[lo:hi]), dtype=torch.float32).reshape(e["shape"])
    return out


class GPT(torch.nn.Module):
    def __init__(self, a, w):
        super().__init__()
        self.a = a
        self.p = torch.nn.ParameterDict({k.replace(".", "/"): torch.nn.Parameter(v.clone()) for k, v in w.items()})

    def w(self, name):
        return self.p[name.replace(".", "/")]

    def forward(self, idx):
        a = self.a
        B, T = idx.shape
        C, H = a.dim, a.heads
        x = F.embedding(idx, self.w("wte.weight")) + self.w("wpe.weight")[:T]
        mask = torch.ones(T, T, dtype=torch.bool).tril()
        for i in range(a.layers):
            h = "h.%d." % i
            y = F.layer_norm(x, (C,), self.w(h + "ln_1.gamma"), self.w(h + "ln_1.beta"), 1e-5)
            qkv = torch.addmm(self.w(h + "attn.qkv_bias"), y.view(-1, C), self.w(h + "attn.qkv_weight"))
            q, k, v = (t.reshape(B, T, H, C // H).transpose(1, 2) for t in qkv.split(C, dim=1))
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(C // H))
            att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
            y = (att @ v).transpose(1, 2).reshape(-1, C)
            x = x + torch.addmm(self.w(h + "attn.out_bias"), y, self.w(h + "attn.out_weight")).view(B, T, C)
            y = F.layer_norm(x, (C,), self.w(h + "ln_2.gamma"), self.w(h + "ln_2.beta"), 1e-5).view(-1, C)
            y = F.gelu(torch.addmm(self.w(h + "mlp.c_fc.bias"), y, self.w(h + "mlp.c_fc.weight")), approximate="tanh")
            x = x + torch.addmm(self.w(h + "mlp.c_proj.bias"), y, self.w(h + "mlp.c_proj.weight")).view(B, T, C)
        x = F.layer_norm(x, (C,), self.w("ln_f.gamma"), self.w("ln_f.beta"), 1e-5)
        return x @ self.w("wte.weight").t()  # the tied output layer


def main():
    ap = argparse.ArgumentParser()
    for k, v in (("layers", 6), ("dim", 384), ("heads", 6), ("seq", 256), ("batch", 4), ("vocab", 50257),
                 ("steps", 10), ("seed", 1), ("threads", 0), ("max_len", 0)):
        ap.add_argument("--" + k.replace("_", "-"), type=int, default=v)
    ap.add_argument("--lr", type=float, default=1e-4)
    ap.add_argument("--clip", type=float, default=0)
    ap.add_argument("--wd", type=float, default=0.01)
    ap.add_argument("--write-init")
    ap.add_argument("--write-tokens")
    ap.add_argument("--write-llmc")
    ap.add_argument("--init")
    ap.add_argument("--tokens")
    a = ap.parse_args()
    if a.write_init:
        w = init_weights(a)
        write_safetensors(a.write_init, w)
        if a.write_llmc:
            write_llmc(a.write_llmc, a, w)
        g = torch.Generator().manual_seed(a.seed + 1)
        n = a.batch * a.seq * a.steps + 1
        tok = torch.randint(0, a.vocab, (n,), generator=g, dtype=torch.int32)
        with open(a.write_tokens, "wb") as f:
            f.write(tok.numpy().astype("<i4").tobytes())
        return
    if a.threads > 0:
        torch.set_num_threads(a.threads)
    model = GPT(a, read_safetensors(a.init))
    with open(a.tokens, "rb") as f:
        tok = torch.frombuffer(bytearray(f.read()), dtype=torch.int32).long()
    opt = torch.optim.AdamW(model.parameters(), lr=a.lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=a.wd)
    span = a.batch * a.seq  # llm.c's loader: B T + 1 tokens from s B T on, row b from b T
    times = []
    for s in range(a.steps):
        at = s % ((len(tok) - 1) // span) * span
        x = tok[at:at + span].view(a.batch, a.seq)
        y = tok[at + 1:at + span + 1].view(a.batch, a.seq)
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(x).view(-1, a.vocab), y.reshape(-1))
        loss.backward()
        if a.clip > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), a.clip)
        opt.step()
        times.append((time.perf_counter() - t0) * 1e3)
        print("step %d loss %.7f ms %.1f" % (s + 1, loss.item(), times[-1]), flush=True)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print("result: torch_ms=%.1f peak_rss_mb=%.0f" % (statistics.median(times[1:] or times), rss))


if __name__ == "__main__":
    sys.exit(main())
