#!/usr/bin/python3
"""Reference values of PyTorch's nn.LSTM, nn.GRU and multi-head scaled-dot-product attention
(F.scaled_dot_product_attention's formula, written out) for
tests/nn/test_rnn.c.

Regenerate (Debian's python3-torch; run from the source tree):
    /usr/bin/python3 tests/data/torch_rnn.py > tests/data/torch_rnn.txt

Every case has fixed inputs and weights (a closed formula, no random generator), computes y in
float64 and the gradients of sum(y * dy) with respect to x and every parameter, and writes them
in strix's layout: recurrent weights as PyTorch stores them (weight_ih_l<k> (G h, d), ...);
attention projections as strix's dense weights W (d, d) with x W + b, i.e. PyTorch's Linear
weight transposed.

File format, whitespace separated, one case after another:
    case <name> <lstm|gru|attention>
    params <batch> <steps> <features> <units or heads> <layers> <return_sequences or causal>
    tensor <name> <rank> <dims...> <values...>   (row-major, %.17g)
Tensors: x, then the parameters in strix's order (recurrent: per layer weight_ih, weight_hh,
bias_ih, bias_hh; attention: query, key, value, out weights, then their biases), y, dy, dx, then
d<parameter> for each parameter in the same order.
"""
import math
import sys

import torch

torch.set_default_dtype(torch.float64)


def fill(shape, a, b):
    """Deterministic values in about [-0.5, 0.5]: 0.5 sin(a i + b)."""
    n = math.prod(shape)
    return torch.tensor([0.5 * math.sin(a * i + b) for i in range(n)]).reshape(shape)


def put(name, t):
    t = t.detach().contiguous()
    vals = " ".join("%.17g" % v for v in t.reshape(-1).tolist())
    print("tensor %s %d %s %s" % (name, t.dim(), " ".join(str(s) for s in t.shape), vals))


def rnn_case(name, kind, batch, steps, feats, units, layers, seq):
    cls = torch.nn.LSTM if kind == "lstm" else torch.nn.GRU
    m = cls(feats, units, num_layers=layers, batch_first=True)
    params = []
    with torch.no_grad():
        for k in range(layers):
            for j, pn in enumerate(["weight_ih", "weight_hh", "bias_ih", "bias_hh"]):
                p = getattr(m, "%s_l%d" % (pn, k))
                p.copy_(fill(p.shape, 0.37 + 0.11 * j + 0.05 * k, 0.3 * j + k))
                params.append(p)
    x = fill((batch, steps, feats), 0.71, 0.2).requires_grad_()
    out, _ = m(x)
    y = out if seq else out[:, -1, :]
    dy = fill(y.shape, 0.53, 1.1)
    (y * dy).sum().backward()
    print("case %s %s" % (name, kind))
    print("params %d %d %d %d %d %d" % (batch, steps, feats, units, layers, int(seq)))
    put("x", x)
    for p in params:
        put("p", p)
    put("y", y)
    put("dy", dy)
    put("dx", x.grad)
    for p in params:
        put("dp", p.grad)


def attention_case(name, batch, steps, d, heads, causal):
    ws = [fill((d, d), 0.29 + 0.07 * k, 0.5 * k).requires_grad_() for k in range(4)]
    bs = [fill((d,), 0.83 + 0.05 * k, 1.0 + k).requires_grad_() for k in range(4)]
    x = fill((batch, steps, d), 0.61, 0.4).requires_grad_()
    dh = d // heads

    def split(t):  # (n, T, d) -> (n, H, T, dh)
        return t.reshape(batch, steps, heads, dh).permute(0, 2, 1, 3)

    q, k, v = (split(x @ ws[i] + bs[i]) for i in range(3))
    # F.scaled_dot_product_attention's definition (Debian's torch 1.13 predates the function)
    s = q @ k.transpose(-2, -1) / math.sqrt(dh)
    if causal:
        s = s.masked_fill(torch.ones(steps, steps).triu(1).bool(), float("-inf"))
    o = torch.softmax(s, dim=-1) @ v
    y = o.permute(0, 2, 1, 3).reshape(batch, steps, d) @ ws[3] + bs[3]
    dy = fill(y.shape, 0.53, 1.1)
    (y * dy).sum().backward()
    print("case %s attention" % name)
    print("params %d %d %d %d %d %d" % (batch, steps, d, heads, 1, int(causal)))
    put("x", x)
    for p in ws + bs:
        put("p", p)
    put("y", y)
    put("dy", dy)
    put("dx", x.grad)
    for p in ws + bs:
        put("dp", p.grad)


print("# made by tests/data/torch_rnn.py with torch %s; do not edit" % torch.__version__)
rnn_case("lstm_last_2layers", "lstm", 2, 4, 3, 5, 2, False)
rnn_case("lstm_sequence", "lstm", 3, 3, 2, 4, 1, True)
rnn_case("gru_sequence_2layers", "gru", 2, 4, 3, 5, 2, True)
rnn_case("gru_last", "gru", 3, 3, 2, 4, 1, False)
attention_case("attention_causal", 2, 4, 6, 2, True)
attention_case("attention_full", 2, 3, 4, 1, False)
