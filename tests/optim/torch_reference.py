#!/usr/bin/python3
"""Reference parameters of PyTorch's optimisers for tests/optim/test_torch.c.

Run once (Debian's python3-torch; the test itself never needs torch):
    /usr/bin/python3 tests/optim/torch_reference.py > tests/optim/data/torch_reference.txt

Every case trains the same 3x4 parameter w, in float64, for 10 steps on
loss = sum((tanh(w) - x)^2) + sum(w * c), with the learning rate of step t (1-based)
lr_t = lr / (1 + 0.1 (t - 1)) set in the parameter group before the step (a schedule fed from
outside, as strix feeds its lr input). The file holds the initial w, x and c, then per case a
line "case <name> <strix kind> lr momentum dampening nesterov rho beta1 beta2 eps wd" and a
line "w" with the 12 parameters after the 10th step (%.17g).
"""
import math

import torch

torch.set_default_dtype(torch.float64)

W0 = [0.3 * math.sin(1.7 * i + 0.2) + 0.05 * i for i in range(12)]
X = [0.4 * math.cos(0.9 * i) for i in range(12)]
C = [0.02 * ((i * 5) % 7 - 3) for i in range(12)]
STEPS = 10

# name, strix kind, torch constructor, hyper-parameters (strix's names)
CASES = [
    ("sgd_wd", "sgd", dict(lr=0.1, wd=0.01)),
    ("momentum", "momentum", dict(lr=0.05, momentum=0.9)),
    ("momentum_dampening_wd", "momentum", dict(lr=0.05, momentum=0.9, dampening=0.3, wd=0.02)),
    ("nesterov_wd", "nesterov", dict(lr=0.05, momentum=0.8, wd=0.01)),
    ("adagrad_wd", "adagrad", dict(lr=0.1, eps=1e-10, wd=0.01)),
    ("rmsprop_wd", "rmsprop", dict(lr=0.01, rho=0.9, eps=1e-3, wd=0.01)),
    ("rmsprop_centered", "rmsprop_centered", dict(lr=0.01, rho=0.9, eps=1e-3)),
    ("adam", "adam", dict(lr=0.05, beta1=0.9, beta2=0.999, eps=1e-3)),
    ("adam_wd", "adam", dict(lr=0.05, beta1=0.8, beta2=0.99, eps=1e-3, wd=0.05)),
    ("adamw", "adamw", dict(lr=0.05, beta1=0.9, beta2=0.999, eps=1e-3, wd=0.1)),
    ("amsgrad", "amsgrad", dict(lr=0.05, beta1=0.9, beta2=0.99, eps=1e-3)),
    ("rmsprop_momentum_wd", "rmsprop_momentum",
     dict(lr=0.01, momentum=0.8, rho=0.9, eps=1e-3, wd=0.01)),
]


def make(kind, w, h):
    wd = h.get("wd", 0.0)
    if kind == "sgd":
        return torch.optim.SGD([w], lr=h["lr"], weight_decay=wd)
    if kind in ("momentum", "nesterov"):
        return torch.optim.SGD([w], lr=h["lr"], momentum=h["momentum"],
                               dampening=h.get("dampening", 0.0),
                               nesterov=kind == "nesterov", weight_decay=wd)
    if kind == "adagrad":
        return torch.optim.Adagrad([w], lr=h["lr"], eps=h["eps"], weight_decay=wd)
    if kind in ("rmsprop", "rmsprop_centered", "rmsprop_momentum"):
        return torch.optim.RMSprop([w], lr=h["lr"], alpha=h["rho"], eps=h["eps"],
                                   weight_decay=wd, centered=kind == "rmsprop_centered",
                                   momentum=h.get("momentum", 0.0))
    betas = (h["beta1"], h["beta2"])
    if kind == "adamw":
        return torch.optim.AdamW([w], lr=h["lr"], betas=betas, eps=h["eps"], weight_decay=wd)
    return torch.optim.Adam([w], lr=h["lr"], betas=betas, eps=h["eps"], weight_decay=wd,
                            amsgrad=kind == "amsgrad")


def fmt(v):
    return " ".join("%.17g" % x for x in v)


def main():
    print("# PyTorch %s, float64: tests/optim/torch_reference.py (regenerate with it)"
          % torch.__version__)
    print("w0 " + fmt(W0))
    print("x " + fmt(X))
    print("c " + fmt(C))
    x = torch.tensor(X).reshape(3, 4)
    c = torch.tensor(C).reshape(3, 4)
    for name, kind, h in CASES:
        w = torch.tensor(W0).reshape(3, 4).requires_grad_(True)
        opt = make(kind, w, h)
        for t in range(1, STEPS + 1):
            for grp in opt.param_groups:
                grp["lr"] = h["lr"] / (1 + 0.1 * (t - 1))
            opt.zero_grad()
            loss = ((torch.tanh(w) - x) ** 2).sum() + (w * c).sum()
            loss.backward()
            opt.step()
        hp = [h["lr"], h.get("momentum", 0.0), h.get("dampening", 0.0),
              1.0 if kind == "nesterov" else 0.0, h.get("rho", 0.0), h.get("beta1", 0.0),
              h.get("beta2", 0.0), h.get("eps", 0.0), h.get("wd", 0.0)]
        print("case %s %s %s" % (name, kind, fmt(hp)))
        print("w " + fmt(w.detach().reshape(-1).tolist()))


if __name__ == "__main__":
    main()
