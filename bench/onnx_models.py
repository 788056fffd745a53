#!/usr/bin/python3
"""onnx_models.py: torchvision's resnet18, mobilenet_v2 and squeezenet1_0 (random weights, eval
mode) exported to ONNX by PyTorch, run by strix's importer, and compared with PyTorch's outputs.

Each model becomes one ONNX test case (model.onnx + test_data_set_0/input_0.pb, output_0.pb
holding PyTorch's output), which strix's conformance runner (build/onnx/onnx_test, the function
behind `strix onnx-test`) imports, optimises, compiles and checks to rtol 1e-4. Correctness only:
timings belong to the benchmark runs. Needs Debian's python3-torch, python3-torchvision and
python3-onnx (scripts/setup --bench):
    /usr/bin/python3 bench/onnx_models.py [--runner build/onnx/onnx_test] [--batch 2]
"""
import argparse
import os
import subprocess
import sys
import tempfile

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


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runner", default="build/onnx/onnx_test")
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--opset", type=int, default=13)
    ap.add_argument("--rtol", default="1e-4")
    ap.add_argument("--atol", default="1e-5")
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
    return failed


if __name__ == "__main__":
    sys.exit(main())
