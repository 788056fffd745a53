#!/usr/bin/env python3
"""bench_idx.py: Python's gzip + NumPy loading MNIST's 60000 training images from the .gz file
into a float32 array (60000, 28, 28, 1) scaled by 1/255: the peer of bench_idx.c.
    /usr/bin/python3 bench/bench_idx.py [FILE] [REPEATS]
Prints the best and median wall time of REPEATS runs (default 7) and the best CPU time."""
import gzip
import statistics
import sys
import time

import numpy as np

path = sys.argv[1] if len(sys.argv) > 1 else "data/mnist/train-images-idx3-ubyte.gz"
repeats = int(sys.argv[2]) if len(sys.argv) > 2 else 7


def load(p):
    with open(p, "rb") as f:
        raw = gzip.decompress(f.read())  # one call into zlib: faster than gzip.open().read()
    magic, n, h, w = np.frombuffer(raw, ">u4", count=4)
    if magic != 0x803:
        raise ValueError(f"{p}: not an IDX u8 rank-3 file")
    x = np.frombuffer(raw, np.uint8, offset=16).reshape(n, h, w, 1)
    return x.astype(np.float32) * np.float32(1.0 / 255.0)


times, cpus = [], []
for _ in range(repeats):
    t0, c0 = time.perf_counter(), time.process_time()
    x = load(path)
    times.append(time.perf_counter() - t0)
    cpus.append(time.process_time() - c0)
assert x.shape == (60000, 28, 28, 1) and x.dtype == np.float32 and float(x.max()) == 1.0
print(f"python gzip+numpy {np.__version__}: wall best {min(times) * 1e3:.1f} ms, median "
      f"{statistics.median(times) * 1e3:.1f} ms; cpu best {min(cpus) * 1e3:.1f} ms ({repeats} runs)")
