#!/usr/bin/python3
"""zoo_torch.py: the PyTorch side of the CNN zoo (bench/zoo.c; bench/compare_zoo runs
both). The same networks as bench/zoo_nets.h, in PyTorch's NCHW, with the same initialisation
(weights Glorot-uniform, biases 0, batch-norm scale 1 and shift 0, momentum 0.1 = strix's 0.9,
eps 1e-5, 1e-3 in inception_v3), optimiser, batch and data; one `result:` line with zoo's field
names.

    /usr/bin/python3 bench/zoo_torch.py --net NAME [--data DIR] [--limit N] [--test-limit N]
        [--epochs E] [--batch B] [--threads T] [--reps R] [--seed S] [--quiet] [--params]

--params prints `params NAME COUNT` (trainable parameters) for the net (or every net with
--net all) and exits: tests/bench/test_zoo.c holds these counts for the strix side.
Training nets: the data stay uint8 as read from the gzip IDX files; each batch is gathered and
converted (x / 255) in the timed loop, as strix's batcher does; inference over the test set in
batches of B, a second (timed) pass after the one that measured the accuracy. Inference nets
(resnet50, inception_v3, random weights): model.eval() + torch.no_grad(), random N(0,1)
images; batch 1: the first call timed apart (first_ms), then the median of R calls
(latency_ms); then batch B (none when B = 1) for infer_ips.
"""
import argparse
import os
import resource
import statistics
import sys
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_mnist import load  # noqa: E402  (the gzip IDX reader of the MNIST comparison)

FASHION = "/usr/share/datasets/fashion-mnist"


def cbr(cin, cout, k, stride=1, pad=0, eps=1e-5, relu=True):
    """Conv2d(bias=False) + BatchNorm2d (+ ReLU); k and pad an int or (h, w)."""
    layers = [nn.Conv2d(cin, cout, k, stride, pad, bias=False),
              nn.BatchNorm2d(cout, eps=eps, momentum=0.1)]
    if relu:
        layers.append(nn.ReLU(inplace=True))
    return nn.Sequential(*layers)


class LeNet5(nn.Module):
    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv2d(1, 6, 5, padding=2)
        self.c2 = nn.Conv2d(6, 16, 5)
        self.f1 = nn.Linear(16 * 5 * 5, 120)
        self.f2 = nn.Linear(120, 84)
        self.f3 = nn.Linear(84, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.c1(x)), 2)
        x = F.max_pool2d(F.relu(self.c2(x)), 2)
        x = F.relu(self.f1(torch.flatten(x, 1)))
        return self.f3(F.relu(self.f2(x)))


class Basic(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.a = cbr(cin, cout, 3, stride, 1)
        self.b = cbr(cout, cout, 3, 1, 1, relu=False)
        self.s = (cbr(cin, cout, 1, stride, 0, relu=False)
                  if stride != 1 or cin != cout else nn.Identity())

    def forward(self, x):
        return F.relu(self.b(self.a(x)) + self.s(x))


class ResNet20(nn.Module):
    def __init__(self):
        super().__init__()
        layers, cin = [cbr(1, 16, 3, 1, 1)], 16
        for stage in range(3):
            for b in range(3):
                cout = 16 << stage
                layers.append(Basic(cin, cout, 2 if stage > 0 and b == 0 else 1))
                cin = cout
        self.body = nn.Sequential(*layers)
        self.fc = nn.Linear(64, 10)

    def forward(self, x):
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(self.body(x), 1), 1))


class VggBn(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(cbr(1, 64, 3, 1, 1), cbr(64, 64, 3, 1, 1), nn.MaxPool2d(2),
                                  cbr(64, 128, 3, 1, 1), cbr(128, 128, 3, 1, 1), nn.MaxPool2d(2))
        self.f1 = nn.Linear(128 * 7 * 7, 256)
        self.f2 = nn.Linear(256, 10)

    def forward(self, x):
        return self.f2(F.relu(self.f1(torch.flatten(self.body(x), 1))))


class MobileNet(nn.Module):
    def __init__(self):
        super().__init__()
        layers, cin = [cbr(1, 32, 3, 1, 1)], 32
        for cout, s in ((64, 1), (128, 2), (128, 1), (256, 2), (256, 1)):
            layers += [nn.Conv2d(cin, cin, 3, s, 1, groups=cin, bias=False),
                       nn.BatchNorm2d(cin, eps=1e-5, momentum=0.1), nn.ReLU(inplace=True),
                       cbr(cin, cout, 1)]
            cin = cout
        self.body = nn.Sequential(*layers)
        self.fc = nn.Linear(256, 10)

    def forward(self, x):
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(self.body(x), 1), 1))


class Bottleneck(nn.Module):
    def __init__(self, cin, planes, stride):
        super().__init__()
        self.body = nn.Sequential(cbr(cin, planes, 1), cbr(planes, planes, 3, stride, 1),
                                  cbr(planes, 4 * planes, 1, relu=False))
        self.s = (cbr(cin, 4 * planes, 1, stride, 0, relu=False)
                  if stride != 1 or cin != 4 * planes else nn.Identity())

    def forward(self, x):
        return F.relu(self.body(x) + self.s(x))


class ResNet50(nn.Module):
    """torchvision's resnet50 (v1.5: the stride on the 3x3 convolution)."""

    def __init__(self):
        super().__init__()
        layers, cin = [cbr(3, 64, 7, 2, 3), nn.MaxPool2d(3, 2, 1)], 64
        for stage, blocks in enumerate((3, 4, 6, 3)):
            for b in range(blocks):
                layers.append(Bottleneck(cin, 64 << stage, 2 if stage > 0 and b == 0 else 1))
                cin = 4 * (64 << stage)
        self.body = nn.Sequential(*layers)
        self.fc = nn.Linear(2048, 1000)

    def forward(self, x):
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(self.body(x), 1), 1))


def bc(cin, cout, k, stride=1, pad=0):
    return cbr(cin, cout, k, stride, pad, eps=1e-3)


class Cat(nn.Module):
    """Branches over one input, concatenated along the channels."""

    def __init__(self, *branches):
        super().__init__()
        self.branches = nn.ModuleList(branches)

    def forward(self, x):
        return torch.cat([b(x) for b in self.branches], 1)


class AvgPool3(nn.Module):
    def forward(self, x):
        return F.avg_pool2d(x, 3, 1, 1)  # count_include_pad=True, as strix's count_include_pad


def inception_a(cin, pf):
    return Cat(bc(cin, 64, 1), nn.Sequential(bc(cin, 48, 1), bc(48, 64, 5, 1, 2)),
               nn.Sequential(bc(cin, 64, 1), bc(64, 96, 3, 1, 1), bc(96, 96, 3, 1, 1)),
               nn.Sequential(AvgPool3(), bc(cin, pf, 1)))


def inception_b(cin):
    return Cat(bc(cin, 384, 3, 2),
               nn.Sequential(bc(cin, 64, 1), bc(64, 96, 3, 1, 1), bc(96, 96, 3, 2)),
               nn.MaxPool2d(3, 2))


def inception_c(cin, c7):
    return Cat(bc(cin, 192, 1),
               nn.Sequential(bc(cin, c7, 1), bc(c7, c7, (1, 7), 1, (0, 3)),
                             bc(c7, 192, (7, 1), 1, (3, 0))),
               nn.Sequential(bc(cin, c7, 1), bc(c7, c7, (7, 1), 1, (3, 0)),
                             bc(c7, c7, (1, 7), 1, (0, 3)), bc(c7, c7, (7, 1), 1, (3, 0)),
                             bc(c7, 192, (1, 7), 1, (0, 3))),
               nn.Sequential(AvgPool3(), bc(cin, 192, 1)))


def inception_d(cin):
    return Cat(nn.Sequential(bc(cin, 192, 1), bc(192, 320, 3, 2)),
               nn.Sequential(bc(cin, 192, 1), bc(192, 192, (1, 7), 1, (0, 3)),
                             bc(192, 192, (7, 1), 1, (3, 0)), bc(192, 192, 3, 2)),
               nn.MaxPool2d(3, 2))


class InceptionE(nn.Module):
    def __init__(self, cin):
        super().__init__()
        self.b1 = bc(cin, 320, 1)
        self.b3 = bc(cin, 384, 1)
        self.b3a, self.b3b = bc(384, 384, (1, 3), 1, (0, 1)), bc(384, 384, (3, 1), 1, (1, 0))
        self.d = nn.Sequential(bc(cin, 448, 1), bc(448, 384, 3, 1, 1))
        self.da, self.db = bc(384, 384, (1, 3), 1, (0, 1)), bc(384, 384, (3, 1), 1, (1, 0))
        self.p = nn.Sequential(AvgPool3(), bc(cin, 192, 1))

    def forward(self, x):
        t, d = self.b3(x), self.d(x)
        return torch.cat([self.b1(x), self.b3a(t), self.b3b(t), self.da(d), self.db(d),
                          self.p(x)], 1)


class InceptionV3(nn.Module):
    """torchvision's inception_v3 without the auxiliary head (aux_logits=False)."""

    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(
            bc(3, 32, 3, 2), bc(32, 32, 3), bc(32, 64, 3, 1, 1), nn.MaxPool2d(3, 2),
            bc(64, 80, 1), bc(80, 192, 3), nn.MaxPool2d(3, 2),
            inception_a(192, 32), inception_a(256, 64), inception_a(288, 64), inception_b(288),
            inception_c(768, 128), inception_c(768, 160), inception_c(768, 160),
            inception_c(768, 192), inception_d(768), InceptionE(1280), InceptionE(2048))
        self.fc = nn.Linear(2048, 1000)

    def forward(self, x):
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(self.body(x), 1), 1))


# name: (class, trains, input (c, h, w), optimiser, lr, default batch)
NETS = {
    "lenet5": (LeNet5, True, (1, 28, 28), "momentum", 0.01, 64),
    "resnet20": (ResNet20, True, (1, 28, 28), "adam", 0.001, 128),
    "vgg_bn": (VggBn, True, (1, 28, 28), "rmsprop", 0.001, 100),
    "mobilenet": (MobileNet, True, (1, 28, 28), "adam", 0.001, 128),
    "resnet50": (ResNet50, False, (3, 224, 224), None, 0, 16),
    "inception_v3": (InceptionV3, False, (3, 299, 299), None, 0, 16),
}


def make(name):
    model = NETS[name][0]()
    for m in model.modules():  # strix's defaults: Glorot uniform, zero biases
        if isinstance(m, (nn.Conv2d, nn.Linear)):
            nn.init.xavier_uniform_(m.weight)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
    return model


def params(model):
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def optimiser(kind, model, lr):
    ps = model.parameters()
    if kind == "momentum":
        return torch.optim.SGD(ps, lr=lr, momentum=0.9)
    if kind == "rmsprop":
        return torch.optim.RMSprop(ps, lr=lr, alpha=0.99, eps=1e-8)
    return torch.optim.Adam(ps, lr=lr, betas=(0.9, 0.999), eps=1e-8)


def to_float(images):
    return torch.from_numpy(images).to(torch.float32).mul_(1.0 / 255.0).unsqueeze(1)


def evaluate(model, x, y, batch):
    correct, t0 = 0, time.perf_counter()
    with torch.no_grad():
        for i in range(0, x.shape[0], batch):
            out = model(to_float(x[i : i + batch]))
            correct += int((out.argmax(1).numpy() == y[i : i + batch]).sum())
    return correct / x.shape[0], time.perf_counter() - t0


def run_train(a, name, model, r):
    _, _, _, kind, lr, _ = NETS[name]
    data = a.data or (FASHION if os.path.isfile(os.path.join(
        FASHION, "train-images-idx3-ubyte.gz")) else "data/mnist")
    r["data"] = "fashion" if "fashion" in data else "mnist"
    xtr, ytr = load(data, "train", a.limit)
    xte, yte = load(data, "test", a.test_limit)
    ytr_t = torch.from_numpy(ytr.astype(np.int64))
    opt, loss_fn, b = optimiser(kind, model, lr), nn.CrossEntropyLoss(), a.batch
    n = xtr.shape[0]
    rng = np.random.default_rng(a.seed)
    model.train()
    t0 = time.perf_counter()
    for epoch in range(a.epochs):
        perm, loss_sum = rng.permutation(n), 0.0
        for s in range(0, n, b):
            idx = perm[s : s + b]
            opt.zero_grad(set_to_none=True)
            loss = loss_fn(model(to_float(xtr[idx])), ytr_t[idx])
            loss.backward()
            opt.step()
            loss_sum += loss.item() * len(idx)
        if not a.quiet:
            print(f"epoch {epoch + 1}: loss {loss_sum / n:.4f}", file=sys.stderr)
    r["train_s"] = time.perf_counter() - t0
    r["img_per_s"] = n * a.epochs / r["train_s"]
    r["loss"] = loss_sum / n
    model.eval()
    r["test_acc"], _ = evaluate(model, xte, yte, b)
    _, secs = evaluate(model, xte, yte, b)
    r["infer_ips"] = xte.shape[0] / secs


def run_infer(a, name, model, r):
    c, h, w = NETS[name][2]
    model.eval()
    r["data"] = "random"
    with torch.no_grad():
        for n in (1, a.batch) if a.batch > 1 else (1,):
            x = torch.randn(n, c, h, w)
            t0 = time.perf_counter()
            out = model(x)
            first = time.perf_counter() - t0
            times = []
            for _ in range(a.reps):
                t0 = time.perf_counter()
                out = model(x)
                times.append(time.perf_counter() - t0)
            call = statistics.median(times)
            if n == 1:
                r["first_ms"], r["latency_ms"] = 1e3 * first, 1e3 * call
                r["out_sum"] = float(torch.softmax(out, 1).sum()) / n
            r["infer_ips"] = n / call


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--net", required=True, choices=list(NETS) + ["all"])
    ap.add_argument("--data", default=None)
    ap.add_argument("--limit", type=int, default=0)
    ap.add_argument("--test-limit", type=int, default=0)
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--batch", type=int, default=0)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--quiet", action="store_true")
    ap.add_argument("--params", action="store_true")
    a = ap.parse_args()
    torch.manual_seed(a.seed)
    if a.params:
        for name in NETS if a.net == "all" else (a.net,):
            print(f"params {name} {params(make(name))}")
        return
    if a.net == "all":
        sys.exit("zoo_torch: --net all only with --params")
    torch.set_num_threads(a.threads)
    a.batch = a.batch or NETS[a.net][5]
    model = make(a.net)
    r = {"train_s": 0, "img_per_s": 0, "test_acc": -1, "loss": -1, "infer_ips": 0,
         "latency_ms": 0, "first_ms": 0, "out_sum": 1}
    try:
        (run_train if NETS[a.net][1] else run_infer)(a, a.net, model, r)
    except (OSError, ValueError) as e:
        sys.exit(f"zoo_torch: {e}")
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"result: net={a.net} data={r['data']} train_s={r['train_s']:.3f} "
          f"img_per_s={r['img_per_s']:.1f} test_acc={r['test_acc']:.4f} loss={r['loss']:.5f} "
          f"peak_rss_mb={rss:.1f} infer_ips={r['infer_ips']:.1f} "
          f"latency_ms={r['latency_ms']:.3f} first_ms={r['first_ms']:.2f} "
          f"params={params(model)} out_sum={r['out_sum']:.5f} batch={a.batch} "
          f"threads={torch.get_num_threads()}")


if __name__ == "__main__":
    main()
