#!/usr/bin/python3
"""onnx_zoo.py: every torchvision image classifier of the families strix covers, and a small
torch.nn.TransformerEncoder text model, exported to ONNX by PyTorch (random weights, eval mode,
opset 13 and 17, a dynamic batch axis), run by strix and compared with PyTorch.

For each model and opset: torch.onnx.export with the batch axis named (dynamic_axes), then
`strix predict MODEL.onnx --input x.npy --output y.npy --batch B` on a batch of --batch
examples run B at a time (B = --run-batch; strix's importer builds the graph for each batch size
it runs, so a run-batch that does not divide the batch checks two builds), and the largest
|strix - PyTorch| divided by the largest |PyTorch| output: a model matches when that is at most
--rtol (1e-4). One line per model and opset:
    resnet18       opset=13  match  max_rel_err=1.2e-07
    vit_b_16       opset=17  FAIL   <strix's message>
and a last line `result: checked=N matched=M failed=F`. The exit status is 0 only when every
model matched.

Then, unless --no-time, `strix bench` (batch 1 and --time-batch) beside PyTorch's eval-mode
model under torch.no_grad on the same threads (alternating rounds, medians); not for
text_encoder_ids, whose token ids strix bench's random inputs are not.

text_encoder takes its token embeddings as floats (batch, 16, 64); text_encoder_ids takes token
ids (batch, 16) of int64 through an nn.Embedding. Models over 2 GB (vit_h_14, regnet_y_128gf)
are written by PyTorch with their weights in external data files beside model.onnx.

The large models take minutes each to export and check: --models picks some (names or family
prefixes, comma-separated: --models resnet18,vit_b_16,swin); --list prints the names; the
default is every model. --dir DIR keeps the exported files there and reuses them on a later run.
Needs Debian's python3-torch, python3-torchvision and python3-onnx (scripts/setup --bench):
    /usr/bin/python3 bench/onnx_zoo.py [--models LIST] [--opsets 13,17] [--no-time]
        [--strix build/tools/strix] [--batch 3] [--run-batch 2] [--dir DIR]
"""
import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch
import torchvision

FAMILIES = ("resnet", "resnext", "wide_resnet", "vgg", "alexnet", "squeezenet", "densenet",
            "googlenet", "inception_v3", "mobilenet_v2", "mobilenet_v3", "mnasnet",
            "shufflenet_v2", "efficientnet", "regnet", "convnext", "vit", "swin")


class TextEncoder(torch.nn.Module):
    """A small text model: token embeddings (given as floats, (batch, seq, d_model), or with
    vocab, token ids (batch, seq) of int64 looked up in an nn.Embedding) plus a learned position
    embedding, two TransformerEncoder layers, mean over the sequence and a linear classifier."""

    def __init__(self, d_model=64, nhead=4, layers=2, seq=16, classes=5, vocab=None):
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, d_model) if vocab else None
        self.pos = torch.nn.Parameter(torch.randn(1, seq, d_model) * 0.1)
        layer = torch.nn.TransformerEncoderLayer(d_model, nhead, dim_feedforward=128,
                                                 dropout=0.1, batch_first=True)
        self.enc = torch.nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.head = torch.nn.Linear(d_model, classes)

    def forward(self, x):
        if self.embed is not None:
            x = self.embed(x)
        return self.head(self.enc(x + self.pos).mean(dim=1))


VOCAB = 100


def example(shape, n):
    """n random inputs of a model taking shape: token ids for (seq,), floats otherwise."""
    if len(shape) == 1:
        return torch.randint(0, VOCAB, (n,) + tuple(shape))
    return torch.randn(n, *shape)


def model_names():
    names = [n for n in torchvision.models.list_models(module=torchvision.models)
             if n.startswith(FAMILIES)]
    return sorted(names) + ["text_encoder", "text_encoder_ids"]


def make_model(name):
    """(model in eval mode, input shape without the batch axis)."""
    torch.manual_seed(0)
    if name == "text_encoder":
        return TextEncoder().eval(), (16, 64)
    if name == "text_encoder_ids":
        return TextEncoder(vocab=VOCAB).eval(), (16,)
    kw = {"weights": None}
    if name in ("googlenet", "inception_v3"):
        # PyTorch's default initialisation: theirs (truncated normal, std 0.01 or 0.1) shrinks
        # GoogLeNet's output to its bias, which checks little
        kw["aux_logits"] = False
        kw["init_weights"] = False
    m = torchvision.models.get_model(name, **kw).eval()
    with torch.no_grad():  # zero-initialised weights (ViT's head) would make the output 0
        for p in m.parameters():
            if p.dim() >= 2 and not p.any():
                p.normal_(0, 0.02)
    size = 299 if name == "inception_v3" else 224
    return m, (3, size, size)


def zero_symbolic(g, x):
    """aten::zero (Swin V2 zeroes the key's part of its qkv bias), which PyTorch 1.13 does not
    export: x - x."""
    return g.op("Sub", x, x)


def export(name, model, shape, path, opset):
    # with gradients on: under no_grad PyTorch's eval-mode attention takes its fused fast path
    # (aten::_native_multi_head_attention), which has no ONNX export
    x = example(shape, 2)
    torch.onnx.export(model, x, path, opset_version=opset, input_names=["x"],
                      output_names=["y"], dynamic_axes={"x": {0: "n"}, "y": {0: "n"}})


def check(a, name, model, shape, path):
    """(True, max relative error) or (False, strix's message)."""
    torch.manual_seed(1)
    x = example(shape, a.batch)
    with torch.no_grad():
        want = model(x).numpy().astype(np.float64)
    d = os.path.dirname(path)
    xin, yout = os.path.join(d, "x.npy"), os.path.join(d, "y.npy")
    np.save(xin, x.numpy())
    r = subprocess.run([a.strix, "predict", path, "--input", xin, "--output", yout,
                        "--batch", str(a.run_batch)], capture_output=True, text=True)
    if r.returncode != 0:
        return False, (r.stderr.strip() or r.stdout.strip()).splitlines()[-1]
    got = np.load(yout).astype(np.float64)
    if got.shape != want.shape:
        return False, "shape %s, want %s" % (got.shape, want.shape)
    err = float(np.max(np.abs(got - want)) / max(np.max(np.abs(want)), 1e-30))
    return err <= a.rtol, err


def strix_bench(a, path, batch):
    env = dict(os.environ, SX_THREADS=str(a.threads))
    r = subprocess.run([a.strix, "bench", path, "--batch", str(batch), "--runs", str(a.runs)],
                       capture_output=True, text=True, env=env)
    m = re.search(r"latency_ms=([0-9.]+) batch_ms=([0-9.]+)", r.stdout)
    if r.returncode != 0 or m is None:
        raise RuntimeError("strix bench %s failed: %s%s" % (path, r.stdout, r.stderr))
    return float(m.group(1)), float(m.group(2))


def torch_bench(a, model, shape, batch):
    out = []
    with torch.no_grad():
        for n in (1, batch):
            x = example(shape, n)
            model(x)
            t = []
            for _ in range(a.runs):
                t0 = time.perf_counter()
                model(x)
                t.append((time.perf_counter() - t0) * 1e3)
            out.append(statistics.median(t))
    return out


def time_model(a, name, model, shape, path):
    torch.set_num_threads(a.threads)
    s1, sb, t1, tb = [], [], [], []
    for _ in range(a.rounds):
        lat, bat = strix_bench(a, path, a.time_batch)
        s1.append(lat)
        sb.append(bat)
        lat, bat = torch_bench(a, model, shape, a.time_batch)
        t1.append(lat)
        tb.append(bat)
    med = statistics.median
    print("  time %-20s strix_1_ms=%.2f torch_1_ms=%.2f strix_%d_ms=%.2f torch_%d_ms=%.2f"
          % (name, med(s1), med(t1), a.time_batch, med(sb), a.time_batch, med(tb)), flush=True)


def pick(a):
    names = model_names()
    if a.models is None:
        return names
    out = []
    for want in a.models.split(","):
        hit = [n for n in names if n == want] or [n for n in names if n.startswith(want)]
        if not hit:
            sys.exit("onnx_zoo.py: no model %r (--list prints them)" % want)
        out += [n for n in hit if n not in out]
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", help="names or family prefixes, comma-separated")
    ap.add_argument("--list", action="store_true", help="print the model names and stop")
    ap.add_argument("--opsets", default="13,17")
    ap.add_argument("--strix", default="build/tools/strix")
    ap.add_argument("--batch", type=int, default=3, help="examples checked")
    ap.add_argument("--run-batch", type=int, default=2, help="examples per strix run")
    ap.add_argument("--rtol", type=float, default=1e-4)
    ap.add_argument("--dir", help="keep the exported models here (and reuse them)")
    ap.add_argument("--no-time", action="store_true", help="check outputs only")
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--time-batch", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--runs", type=int, default=5)
    a = ap.parse_args()
    torch.onnx.register_custom_op_symbolic("aten::zero", zero_symbolic, 13)
    if a.list:
        print("\n".join(model_names()))
        return 0
    root = a.dir or tempfile.mkdtemp(prefix="strix_onnx_zoo_")
    checked = matched = 0
    try:
        for name in pick(a):
            model, shape = make_model(name)
            for opset in (int(o) for o in a.opsets.split(",")):
                d = os.path.join(root, "%s_op%d" % (name, opset))
                path = os.path.join(d, "model.onnx")
                os.makedirs(d, exist_ok=True)
                try:
                    if not os.path.exists(path):
                        export(name, model, shape, path, opset)
                    ok, what = check(a, name, model, shape, path)
                except Exception as e:  # an export PyTorch refuses counts as a failure
                    ok, what = False, "export: %s" % str(e).splitlines()[0]
                checked += 1
                matched += ok
                detail = "max_rel_err=%.2g" % what if isinstance(what, float) else what
                print("%-20s opset=%d  %-5s  %s" % (name, opset, "match" if ok else "FAIL",
                                                    detail), flush=True)
                if ok and not a.no_time and len(shape) == 1:
                    # strix bench feeds random floats, not token ids
                    print("  time %-20s skipped (token ids)" % name)
                elif ok and not a.no_time:
                    time_model(a, name, model, shape, path)
            del model
    finally:
        if a.dir is None:
            shutil.rmtree(root, ignore_errors=True)
    print("result: checked=%d matched=%d failed=%d" % (checked, matched, checked - matched))
    return 0 if matched == checked else 1


if __name__ == "__main__":
    sys.exit(main())
