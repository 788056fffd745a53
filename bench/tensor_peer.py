#!/usr/bin/python3
"""tensor_peer.py: the NumPy and PyTorch side of the tensor benchmark (bench_tensor.c is
strix's side; bench/compare_tensor runs both and prints one table). Same shapes, same medians
after a warm-up, same `--raw` line format (`key sample sample ...`).

    /usr/bin/python3 bench/tensor_peer.py [--raw] [--reps N] [--side N] [--rside N]
                                          [--threads LIST] [fold|repeat|conv]...

fold:   x.sum(axis) of a (side,)*4 float32 array, axes 0, 1 and (0, 2); time and peak memory
        (x.nbytes + the tracemalloc peak during the call: NumPy reports its data buffers to
        tracemalloc, so this counts the result and any temporaries, as strix's hook does).
        Also with out=: the result written into an array already in memory.
repeat: x2 on every axis of a (rside,)*4 array, three ways: the np.repeat chain (one call per
        axis, what a NumPy user writes), broadcast_to + reshape (a single copy), and copyto of
        the broadcast view into an existing array (what strix's _out form does).
conv:   torch.nn.functional.conv2d forward, then autograd's backward giving both the input and
        the weight gradients, NCHW (PyTorch's native layout), padding 2 (= SAME for 5x5, stride
        1), torch.set_num_threads(t) for each t of --threads.
"""
import argparse
import statistics
import sys
import time
import tracemalloc

import numpy as np

RAW = False


def emit(key, samples):
    if RAW:
        print(key, " ".join(f"{v:.9g}" for v in samples))


def timed(fn, reps):
    """fn() timed reps times after one warm-up; the result is dropped outside the timing."""
    r = fn()
    del r
    out = []
    for _ in range(reps):
        t0 = time.perf_counter()
        r = fn()
        out.append((time.perf_counter() - t0) * 1e3)
        del r
    return out


def peak_bytes(fn, base):
    """base (the input's bytes) + the most bytes tracemalloc saw live during fn()."""
    tracemalloc.start()
    tracemalloc.reset_peak()
    r = fn()
    peak = tracemalloc.get_traced_memory()[1]
    del r
    tracemalloc.stop()
    return base + peak


def cube(side):
    return np.random.default_rng(2).random((side,) * 4, dtype=np.float32)


def bench_fold(reps, side):
    x = cube(side)
    if not RAW:
        print(f"\nNumPy {np.__version__}: sum of a {x.shape} float32 array: ms, median of {reps} "
              "runs; peak = input + tracemalloc peak of the `new` call")
        print(f"{'case':<12} {'way':>5} {'numpy':>10} {'peak MB':>12}")
    for name, axes in (("ax0", 0), ("ax1", 1), ("ax02", (0, 2))):
        kept = x.sum(axis=axes)
        fn = lambda: x.sum(axis=axes)  # noqa: E731
        t = timed(fn, reps)
        t_out = timed(lambda: x.sum(axis=axes, out=kept), reps)
        peak = peak_bytes(fn, x.nbytes)
        emit(f"sum/{name}/numpy", t)
        emit(f"sum/{name}/numpy_out", t_out)
        emit(f"sum/{name}/numpy_peak", [peak])
        if not RAW:
            print(f"{name:<12} {'new':>5} {statistics.median(t):10.2f} {peak * 1e-6:12.2f}")
            print(f"{name:<12} {'out':>5} {statistics.median(t_out):10.2f}")


def bench_repeat(reps, side):
    x = cube(side)
    n = side
    view = x[:, None, :, None, :, None, :, None]
    full = (n, 2, n, 2, n, 2, n, 2)

    def chain():
        return x.repeat(2, 0).repeat(2, 1).repeat(2, 2).repeat(2, 3)

    def bcast():
        return np.broadcast_to(view, full).reshape(2 * n, 2 * n, 2 * n, 2 * n)

    kept = chain()
    kept8 = kept.reshape(full)  # a view of kept: copying into it fills kept

    def into():
        np.copyto(kept8, view)

    assert np.array_equal(kept, bcast())
    into()
    assert np.array_equal(kept, chain())
    if not RAW:
        print(f"\nNumPy: repeat x2 on every axis of a {x.shape} float32 array: ms, median of "
              f"{reps} runs (new: np.repeat per axis; bcast: broadcast_to + reshape; out: copyto "
              "into an existing array)")
        print(f"{'way':<12} {'numpy':>10} {'peak MB':>12}")
    for name, fn in (("numpy", chain), ("numpy_bcast", bcast), ("numpy_out", into)):
        t = timed(fn, reps)
        emit(f"repeat/x2/{name}", t)
        peak = 0
        if name != "numpy_out":
            peak = peak_bytes(fn, x.nbytes)
            emit(f"repeat/x2/{name}_peak", [peak])
        if not RAW:
            print(f"{name:<12} {statistics.median(t):10.2f} {peak * 1e-6:12.2f}")


def bench_conv(reps, tlist):
    import torch
    import torch.nn.functional as F

    if RAW:
        print("info/torch", torch.__version__)
        print("info/torch_mkldnn", torch.backends.mkldnn.is_available())
    else:
        print(f"\nPyTorch {torch.__version__} conv2d (NCHW, padding 2): ms, median of {reps} runs")
        print(f"{'shapes':<28} {'threads':>7} {'fwd':>8} {'bwd':>8} {'total':>8}")
    cases = (("c1", (100, 28, 28, 1), (5, 5, 1, 32)), ("c2", (100, 14, 14, 32), (5, 5, 32, 64)))
    g = torch.Generator().manual_seed(3)
    for name, (n, h, w, c), (kh, kw, _, f) in cases:
        x = torch.randn(n, c, h, w, generator=g).requires_grad_()
        k = (0.1 * torch.randn(f, c, kh, kw, generator=g)).requires_grad_()
        dy = torch.randn(n, f, h, w, generator=g)
        for t in tlist:
            torch.set_num_threads(t)
            fwd, bwd, tot = [], [], []
            for r in range(reps + 1):  # the first run is the warm-up
                x.grad = None
                k.grad = None
                t0 = time.perf_counter()
                y = F.conv2d(x, k, padding=2)
                t1 = time.perf_counter()
                y.backward(dy)
                t2 = time.perf_counter()
                if r > 0:
                    fwd.append((t1 - t0) * 1e3)
                    bwd.append((t2 - t1) * 1e3)
                    tot.append((t2 - t0) * 1e3)
                del y
            for part, v in (("fwd", fwd), ("bwd", bwd), ("total", tot)):
                emit(f"conv/{name}/t{t}/torch/{part}", v)
            if not RAW:
                shapes = f"[{n},{h},{w},{c}]*[{kh},{kw},{c},{f}]"
                print(f"{shapes:<28} {t:7d} {statistics.median(fwd):8.2f} "
                      f"{statistics.median(bwd):8.2f} {statistics.median(tot):8.2f}")


def main():
    global RAW
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--raw", action="store_true")
    ap.add_argument("--reps", type=int, default=0)
    ap.add_argument("--side", type=int, default=64)
    ap.add_argument("--rside", type=int, default=32)
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("sections", nargs="*", metavar="fold|repeat|conv")
    a = ap.parse_args()
    bad = set(a.sections) - {"fold", "repeat", "conv"}
    if bad:
        ap.error(f"unknown section {sorted(bad)[0]}")
    RAW = a.raw
    tlist = [int(t) for t in a.threads.split(",")]
    want = set(a.sections) or {"fold", "repeat", "conv"}
    if RAW:
        print("info/numpy", np.__version__)
        print("info/python", sys.version.split()[0])
    if "fold" in want:
        bench_fold(a.reps or 9, a.side)
    if "repeat" in want:
        bench_repeat(a.reps or 9, a.rside)
    if "conv" in want:
        bench_conv(a.reps or 5, tlist)


if __name__ == "__main__":
    main()
