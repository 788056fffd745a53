#!/usr/bin/python3
"""torch_mnist.py: the PyTorch side of the MNIST benchmark: the reference network of
examples/mnist_train.c (Owl's lazy_mnist) with the same settings, trained for one epoch, then
timed on inference; one `result:` line in mnist_train's format (bench/compare_torch runs both).

    /usr/bin/python3 bench/torch_mnist.py [--data DIR] [--limit N] [--threads T] [--seed S]
                                          [--init glorot|torch] [--quiet]

Network (PyTorch's native NCHW): x/256 -> conv2d 5x5 1->32 padding 2 (SAME) + relu ->
max_pool 2x2 -> dropout 0.1 -> dense 6272->1024 relu -> dense 1024->10; cross-entropy on the
logits (softmax folded in), Adagrad lr 0.005 (eps 1e-10, accumulators 0: strix's), batch 100,
shuffled. Weights Glorot-uniform and biases 0 like strix (--init torch: PyTorch's defaults).
The data stay uint8 as read from the gzip IDX files (47 MB for 60000 images); each batch is
gathered and converted to float32 in the loop, which is timed, as strix's batcher is.

Result fields: test_accuracy (after the epoch), train_seconds (the training loop alone),
images_per_second, peak_rss_mb (getrusage ru_maxrss: the whole process, Python and torch
included), infer_images_per_second (model.eval() + torch.no_grad() over the 10000 test images
in batches of 100, conversion included; a second pass, after the untimed one that measured the
accuracy, as mnist_train times a second pass too), median_step_ms.
"""
import argparse
import gzip
import os
import resource
import statistics
import struct
import sys
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

BATCH = 100


def read_idx(path, limit=0):
    """An IDX file of unsigned bytes (gzip-compressed) as a NumPy uint8 array of its shape,
    decompressed straight into the array (no second copy of the payload)."""
    with gzip.open(path, "rb") as f:
        head = f.read(4)
        magic = struct.unpack(">I", head)[0] if len(head) == 4 else 0
        if magic >> 8 != 0x08 or not 1 <= magic & 0xFF <= 8:
            raise ValueError(f"{path}: not an IDX file of unsigned bytes")
        rank = magic & 0xFF
        dims = struct.unpack(f">{rank}I", f.read(4 * rank))
        a = np.empty(dims, dtype=np.uint8)
        got = f.readinto(memoryview(a).cast("B"))
        if got != a.size or f.read(1):
            raise ValueError(f"{path}: the payload does not match the header's {dims}")
    return a[:limit].copy() if 0 < limit < a.shape[0] else a


def load(data, part, limit=0):
    stem = "train" if part == "train" else "t10k"
    x = read_idx(os.path.join(data, f"{stem}-images-idx3-ubyte.gz"), limit)
    y = read_idx(os.path.join(data, f"{stem}-labels-idx1-ubyte.gz"), limit)
    if x.shape[0] != y.shape[0]:
        raise ValueError(f"{data}: {y.shape[0]} {part} labels but {x.shape[0]} images")
    return x, y


class LazyMnist(nn.Module):
    def __init__(self, init):
        super().__init__()
        self.conv = nn.Conv2d(1, 32, 5, padding=2)
        self.drop = nn.Dropout(0.1)
        self.fc = nn.Linear(32 * 14 * 14, 1024)
        self.out = nn.Linear(1024, 10)
        if init == "glorot":
            for m in (self.conv, self.fc, self.out):
                nn.init.xavier_uniform_(m.weight)
                nn.init.zeros_(m.bias)

    def forward(self, x):
        x = x * (1.0 / 256.0)  # the lambda layer of mnist_train
        x = F.max_pool2d(F.relu(self.conv(x)), 2)
        x = self.drop(x)
        x = F.relu(self.fc(torch.flatten(x, 1)))
        return self.out(x)


def batch_tensor(images, idx):
    """Gather a batch of uint8 images and convert it to float32 NCHW (n, 1, 28, 28)."""
    b = torch.from_numpy(images[idx] if idx is not None else images)
    return b.to(torch.float32).unsqueeze(1)


def evaluate(model, x, y):
    """(correct predictions, seconds) over the set, batches of BATCH, conversion included."""
    correct = 0
    t0 = time.perf_counter()
    with torch.no_grad():
        for i in range(0, x.shape[0], BATCH):
            out = model(batch_tensor(x[i : i + BATCH], None))
            correct += int((out.argmax(1).numpy() == y[i : i + BATCH]).sum())
    return correct, time.perf_counter() - t0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", default="data/mnist")
    ap.add_argument("--limit", type=int, default=0, help="train on the first N images only")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--init", choices=("glorot", "torch"), default="glorot")
    ap.add_argument("--quiet", action="store_true")
    a = ap.parse_args()

    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    try:
        xtr, ytr = load(a.data, "train", a.limit)
        xte, yte = load(a.data, "test")
    except (OSError, ValueError) as e:
        sys.exit(f"torch_mnist: {e}\n(run scripts/fetch_mnist to get the data)")
    ytr_t = torch.from_numpy(ytr.astype(np.int64))

    model = LazyMnist(a.init)
    opt = torch.optim.Adagrad(model.parameters(), lr=0.005, eps=1e-10)
    loss_fn = nn.CrossEntropyLoss()
    if not a.quiet:
        print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, mkldnn "
              f"{torch.backends.mkldnn.is_available()}; {xtr.shape[0]} training images",
              file=sys.stderr)

    n = xtr.shape[0]
    steps = (n + BATCH - 1) // BATCH
    perm = np.random.default_rng(a.seed).permutation(n)
    model.train()
    step_times, loss_sum = [], 0.0
    t0 = time.perf_counter()
    for s in range(steps):
        ts = time.perf_counter()
        idx = perm[s * BATCH : (s + 1) * BATCH]
        x = batch_tensor(xtr, idx)
        y = ytr_t[idx]
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        lv = loss.item()
        loss_sum += lv * len(idx)
        step_times.append(time.perf_counter() - ts)
        if not a.quiet and ((s + 1) % 100 == 0 or s + 1 == steps):
            el = time.perf_counter() - t0
            print(f"step {s + 1}/{steps} loss {loss_sum / min(n, (s + 1) * BATCH):.4f} "
                  f"{min(n, (s + 1) * BATCH) / el:.0f} img/s", file=sys.stderr)
    train_s = time.perf_counter() - t0

    model.eval()
    correct, _ = evaluate(model, xte, yte)  # the accuracy; also warms inference up
    _, infer_s = evaluate(model, xte, yte)
    ru = resource.getrusage(resource.RUSAGE_SELF)
    acc = correct / xte.shape[0]
    if not a.quiet:
        print(f"test accuracy {100 * acc:.2f}%", file=sys.stderr)
    print(f"result: test_accuracy={acc:.4f} train_seconds={train_s:.2f} "
          f"images_per_second={n / train_s:.0f} peak_rss_mb={ru.ru_maxrss / 1024:.0f} "
          f"infer_images_per_second={xte.shape[0] / infer_s:.0f} "
          f"median_step_ms={1e3 * statistics.median(step_times):.1f}")


if __name__ == "__main__":
    main()
