#!/usr/bin/python3
"""Reference values of PyTorch's Conv2d / MaxPool2d / AvgPool2d for tests/autodiff/test_torch.c.

Regenerate (Debian's python3-torch; run from the source tree):
    /usr/bin/python3 tests/data/torch_conv_pool.py > tests/data/torch_conv_pool.txt

Every case has fixed inputs (a closed formula, no random generator), computes y = op(x[, k])
and the gradients of sum(y * dy) with respect to x (and k) in float64, and writes them in
strix's layout: images NHWC (PyTorch's NCHW permuted by (0, 2, 3, 1)), kernels HWIO (PyTorch's
Conv2d weight (f, c/groups, kh, kw) permuted by (2, 3, 1, 0)). Asymmetric pads and SAME_LOWER
(which PyTorch's layers do not take) are F.pad before a padding-0 layer.

File format, whitespace separated, one case after another:
    case <name> <conv|maxpool|avgpool>
    params <stride_h> <stride_w> <pad_top> <pad_bottom> <pad_left> <pad_right>
           <dilation_h> <dilation_w> <groups> <kernel_h> <kernel_w> <ceil_mode> <count_include_pad>
    <tensor> x, k (conv only), y, dy, dx, dk (conv only), each as:
    tensor <name> <rank> <dims...> <values...>   (row-major, %.17g)
The pads are strix's EXPLICIT pads (the test uses SX_PAD_EXPLICIT; SAME_LOWER cases list the
pads SAME_LOWER gives, and the test runs them as SX_PAD_SAME_LOWER too).
"""
import math
import sys

import torch
import torch.nn.functional as F

torch.set_default_dtype(torch.float64)


def fixed(shape, salt):
    """Deterministic values in (-1, 1), distinct enough that no max-pool window ties."""
    n = math.prod(shape)
    v = [math.sin(1.0 + 0.7 * i + salt) * 0.9 + 0.05 * math.cos(3.1 * i * i + salt)
         for i in range(n)]
    return torch.tensor(v).reshape(shape)


def emit(name, t, perm):
    t = t.detach().permute(*perm).contiguous()
    dims = " ".join(str(d) for d in t.shape)
    vals = " ".join("%.17g" % v for v in t.flatten().tolist())
    print("tensor %s %d %s %s" % (name, t.dim(), dims, vals))


NHWC = (0, 2, 3, 1)
HWIO = (2, 3, 1, 0)


def conv_case(name, n, c, h, w, f, kh, kw, stride=(1, 1), pads=(0, 0, 0, 0), dil=(1, 1),
              groups=1, salt=0.0):
    """pads = (top, bottom, left, right)"""
    x = fixed((n, c, h, w), salt).requires_grad_()
    k = fixed((f, c // groups, kh, kw), salt + 1.0).requires_grad_()
    t, b, l, r = pads
    xp = F.pad(x, (l, r, t, b))
    y = F.conv2d(xp, k, stride=stride, dilation=dil, groups=groups)
    dy = fixed(tuple(y.shape), salt + 2.0)
    (y * dy).sum().backward()
    print("case %s conv" % name)
    print("params %d %d %d %d %d %d %d %d %d %d %d 0 0"
          % (stride[0], stride[1], t, b, l, r, dil[0], dil[1], groups, kh, kw))
    emit("x", x, NHWC)
    emit("k", k, HWIO)
    emit("y", y, NHWC)
    emit("dy", dy, NHWC)
    emit("dx", x.grad, NHWC)
    emit("dk", k.grad, HWIO)


def pool_case(name, kind, n, c, h, w, kh, kw, stride, pad=(0, 0), dil=(1, 1), ceil=False,
              count_include_pad=False, salt=0.0):
    """PyTorch's pools take symmetric pads: pad = (rows, columns)."""
    x = fixed((n, c, h, w), salt).requires_grad_()
    if kind == "maxpool":
        y = F.max_pool2d(x, (kh, kw), stride=stride, padding=pad, dilation=dil, ceil_mode=ceil)
    else:
        y = F.avg_pool2d(x, (kh, kw), stride=stride, padding=pad, ceil_mode=ceil,
                         count_include_pad=count_include_pad)
    dy = fixed(tuple(y.shape), salt + 2.0)
    (y * dy).sum().backward()
    print("case %s %s" % (name, kind))
    print("params %d %d %d %d %d %d %d %d 1 %d %d %d %d"
          % (stride[0], stride[1], pad[0], pad[0], pad[1], pad[1], dil[0], dil[1], kh, kw,
             int(ceil), int(count_include_pad)))
    emit("x", x, NHWC)
    emit("y", y, NHWC)
    emit("dy", dy, NHWC)
    emit("dx", x.grad, NHWC)


def same_lower_pads(size, k, s, d):
    ke = d * (k - 1) + 1
    out = -(-size // s)
    total = max((out - 1) * s + ke - size, 0)
    return total - total // 2, total // 2


def main():
    print("# made by tests/data/torch_conv_pool.py with torch %s; do not edit" % torch.__version__)
    conv_case("stride2_pad1", 2, 3, 7, 6, 4, 3, 3, stride=(2, 2), pads=(1, 1, 1, 1), salt=0.1)
    conv_case("groups2", 1, 4, 5, 6, 6, 3, 2, pads=(1, 1, 0, 0), groups=2, salt=0.2)
    conv_case("depthwise_x2", 2, 3, 6, 5, 6, 3, 3, stride=(2, 1), pads=(1, 1, 1, 1), groups=3,
              salt=0.3)
    conv_case("dilation2", 1, 2, 8, 7, 3, 3, 2, pads=(2, 2, 1, 1), dil=(2, 2), salt=0.4)
    conv_case("asymmetric_pads", 1, 2, 5, 6, 3, 3, 3, stride=(1, 2), pads=(2, 0, 1, 3), salt=0.5)
    t, b = same_lower_pads(7, 2, 2, 1)
    l, r = same_lower_pads(6, 3, 2, 1)
    conv_case("same_lower", 1, 2, 7, 6, 2, 2, 3, stride=(2, 2), pads=(t, b, l, r), salt=0.6)
    conv_case("grouped_dilated_strided", 1, 4, 9, 8, 4, 2, 3, stride=(2, 3), pads=(1, 0, 2, 1),
              dil=(3, 1), groups=2, salt=0.7)
    pool_case("max_stride2_pad1", "maxpool", 2, 2, 7, 6, 3, 3, (2, 2), pad=(1, 1), salt=1.1)
    pool_case("max_ceil", "maxpool", 1, 2, 6, 7, 3, 2, (2, 2), ceil=True, salt=1.2)
    pool_case("max_dilation2", "maxpool", 1, 2, 7, 7, 2, 3, (1, 2), pad=(1, 1), dil=(2, 2),
              ceil=True, salt=1.3)
    pool_case("avg_count_pad", "avgpool", 2, 2, 6, 7, 3, 3, (2, 2), pad=(1, 1),
              count_include_pad=True, salt=1.4)
    pool_case("avg_no_count_pad", "avgpool", 2, 2, 6, 7, 3, 3, (2, 2), pad=(1, 1),
              count_include_pad=False, salt=1.5)
    pool_case("avg_ceil_count_pad", "avgpool", 1, 3, 5, 6, 2, 3, (2, 2), pad=(1, 1), ceil=True,
              count_include_pad=True, salt=1.6)
    pool_case("avg_ceil", "avgpool", 1, 2, 6, 5, 3, 2, (2, 1), ceil=True, salt=1.7)


if __name__ == "__main__":
    sys.exit(main())
