#!/usr/bin/python3
"""onnx_models.py: torchvision's resnet18, mobilenet_v2 and squeezenet1_0 (random weights, eval
mode) exported to ONNX by PyTorch, run by strix's importer, and compared with PyTorch's outputs.

Each model becomes one ONNX test case (model.onnx + test_data_set_0/input_0.pb, output_0.pb
holding PyTorch's output), which strix's conformance runner (build/onnx/onnx_test, the function
behind `strix onnx-test`) imports, optimises, compiles and checks to rtol 1e-4.

Then, unless --no-time, the inference time side by side: strix's compiled model (`strix bench
MODEL.onnx --batch N --runs R`, SX_THREADS=T) and PyTorch's eval-mode model under torch.no_grad
(torch.set_num_threads(T)), on the same threads, alternating: K rounds, each strix's median of
R runs then PyTorch's median of R runs (after a warm-up), and the median of the K round medians
printed per model, for one example and for a batch of N. The machine's load average is printed
before and after: timings taken while other work runs are not to be trusted. Needs Debian's
python3-torch, python3-torchvision and python3-onnx (scripts/setup --bench):
    /usr/bin/python3 bench/onnx_models.py [--runner build/onnx/onnx_test] [--batch 2]
        [--strix build/tools/strix] [--threads T] [--time-batch 8] [--rounds 5] [--runs 5]
"""
import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

import onnx
import onnx.numpy_helper
import torch
import torchvision


def export_case(name, model, batch, size, root, opset):
    torch.manual_seed(0)
    x = torch.randn(batch, 3, size, size)
    model.eval()
    with torch.no_grad():
        y = model(x)
    case = os.path.join(root, "test_" + name)
    data = os.path.join(case, "test_data_set_0")
    os.makedirs(data)
    torch.onnx.export(model, x, os.path.join(case, "model.onnx"), opset_version=opset,
                      input_names=["x"], output_names=["y"])
    for fname, t, tname in (("input_0.pb", x, "x"), ("output_0.pb", y, "y")):
        tp = onnx.numpy_helper.from_array(t.numpy(), tname)
        with open(os.path.join(data, fname), "wb") as f:
            f.write(tp.SerializeToString())
    return case


def strix_bench(strix, model_path, batch, runs, threads):
    """One round of `strix bench`: (latency_ms, batch_ms), each the median of `runs` runs."""
    env = dict(os.environ, SX_THREADS=str(threads))
    r = subprocess.run([strix, "bench", model_path, "--batch", str(batch), "--runs", str(runs)],
                       capture_output=True, text=True, env=env)
    m = re.search(r"latency_ms=([0-9.]+) batch_ms=([0-9.]+)", r.stdout)
    if r.returncode != 0 or m is None:
        raise RuntimeError("strix bench %s failed: %s%s" % (model_path, r.stdout, r.stderr))
    return float(m.group(1)), float(m.group(2))


def torch_bench(model, size, batch, runs):
    """One round for PyTorch: (latency_ms, batch_ms), medians of `runs` runs after a warm-up."""
    out = []
    with torch.no_grad():
        for n in (1, batch):
            x = torch.rand(n, 3, size, size)
            model(x)
            t = []
            for _ in range(runs):
                t0 = time.perf_counter()
                model(x)
                t.append((time.perf_counter() - t0) * 1e3)
            out.append(statistics.median(t))
    return out[0], out[1]


def time_models(a, models, root):
    torch.set_num_threads(a.threads)
    print("load average before timing: %.2f %.2f %.2f (cores: %d)"
          % (os.getloadavg() + (os.cpu_count(),)))
    print("%-14s %8s %12s %12s %14s %14s" % ("model", "threads", "strix_1_ms", "torch_1_ms",
                                             "strix_%d_ms" % a.time_batch,
                                             "torch_%d_ms" % a.time_batch))
    for name, (model, size) in models.items():
        path = os.path.join(root, "test_" + name, "model.onnx")
        s1, sb, t1, tb = [], [], [], []
        for _ in range(a.rounds):  # alternating: a strix round, then a PyTorch round
            lat, bat = strix_bench(a.strix, path, a.time_batch, a.runs, a.threads)
            s1.append(lat)
            sb.append(bat)
            lat, bat = torch_bench(model, size, a.time_batch, a.runs)
            t1.append(lat)
            tb.append(bat)
        med = statistics.median
        print("%-14s %8d %12.2f %12.2f %14.2f %14.2f"
              % (name, a.threads, med(s1), med(t1), med(sb), med(tb)), flush=True)
    print("load average after timing: %.2f %.2f %.2f" % os.getloadavg())


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runner", default="build/onnx/onnx_test")
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--opset", type=int, default=13)
    ap.add_argument("--rtol", default="1e-4")
    ap.add_argument("--atol", default="1e-5")
    ap.add_argument("--strix", default="build/tools/strix")
    ap.add_argument("--no-time", action="store_true", help="check outputs only")
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--time-batch", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--runs", type=int, default=5)
    a = ap.parse_args()
    torch.manual_seed(0)
    models = {
        "resnet18": (torchvision.models.resnet18(weights=None), 224),
        "mobilenet_v2": (torchvision.models.mobilenet_v2(weights=None), 224),
        "squeezenet1_0": (torchvision.models.squeezenet1_0(weights=None), 224),
    }
    failed = 0
    with tempfile.TemporaryDirectory(prefix="strix_onnx_models_") as root:
        for name, (model, size) in models.items():
            export_case(name, model, a.batch, size, root, a.opset)
        r = subprocess.run([a.runner, root, "--rtol", a.rtol, "--atol", a.atol],
                           capture_output=True, text=True)
        sys.stdout.write(r.stdout)
        sys.stderr.write(r.stderr)
        failed = r.returncode
        if not a.no_time:
            time_models(a, models, root)
    return failed


if __name__ == "__main__":
    sys.exit(main())
