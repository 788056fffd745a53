#!/usr/bin/python3
"""Reference learning rates of PyTorch's schedulers for tests/optim/test_schedule.c.

Run once (Debian's python3-torch; the test itself never needs torch):
    /usr/bin/python3 tests/optim/torch_schedules.py > tests/optim/data/torch_schedules.txt

Each line: "<name> <base lr> <n> lr_1 ... lr_n", the rate of steps 1..n (the rate the optimiser
used at each step, read before scheduler.step()):
  warmup:    LinearLR(start_factor=1/5, end_factor=1, total_iters=4): strix's warmup, W = 5
  cosine:    CosineAnnealingLR(T_max=20, eta_min=0.001): strix's cosine, W = 0, T = 20
  one_cycle: OneCycleLR(max_lr=0.1, total_steps=30) (pct_start 0.3, div_factor 25,
             final_div_factor 1e4, anneal 'cos', cycle_momentum off)
  plateau:   ReduceLROnPlateau(factor=0.5, patience=1) on the values of the line "metrics",
             one epoch each (the rate during each epoch)
"""
import torch

torch.set_default_dtype(torch.float64)


def opt(lr):
    return torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=lr)


def trace(o, sched, n):
    out = []
    for _ in range(n):
        out.append(o.param_groups[0]["lr"])
        o.step()
        sched.step()
    return out


def fmt(name, lr, v):
    return "%s %.17g %d %s" % (name, lr, len(v), " ".join("%.17g" % x for x in v))


def main():
    print("# PyTorch %s: tests/optim/torch_schedules.py (regenerate with it)" % torch.__version__)
    o = opt(0.1)
    print(fmt("warmup", 0.1, trace(o, torch.optim.lr_scheduler.LinearLR(
        o, start_factor=1 / 5, end_factor=1.0, total_iters=4), 12)))
    o = opt(0.1)
    print(fmt("cosine", 0.1, trace(o, torch.optim.lr_scheduler.CosineAnnealingLR(
        o, T_max=20, eta_min=0.001), 20)))
    o = opt(0.1)
    print(fmt("one_cycle", 0.1, trace(o, torch.optim.lr_scheduler.OneCycleLR(
        o, max_lr=0.1, total_steps=30, cycle_momentum=False), 30)))
    metrics = [1.0, 0.9, 0.95, 0.93, 0.92, 0.91, 0.85, 0.86, 0.87, 0.88]
    o = opt(0.1)
    sched = torch.optim.lr_scheduler.ReduceLROnPlateau(o, factor=0.5, patience=1)
    lrs = []
    for m in metrics:
        lrs.append(o.param_groups[0]["lr"])
        sched.step(m)
    print("metrics %d %s" % (len(metrics), " ".join("%.17g" % x for x in metrics)))
    print(fmt("plateau", 0.1, lrs))


if __name__ == "__main__":
    main()
